package node

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/internal/redistest"
)

// /metrics on every node of a 3-node cluster with Redis, scraped during a
// load at twice three tenants' limits through every node and after it:
//
//   - the admissions each node counted (ringgate_decisions_total
//     {result="allowed"}), summed over the nodes, are what reached the
//     provider, per tenant, within 2 %;
//   - the hops the nodes counted as answered are the requests sent to a
//     node that does not own their tenant;
//   - each node's ring version and members are its /cluster's;
//   - Redis calls are counted, and timed, with no error.
func TestClusterMetricsMatchProvider(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const window, rpm = 2 * time.Second, 30
	srv := redistest.Start(t)
	tenants := []config.Tenant{clTenant("m1", rpm), clTenant("m2", rpm), clTenant("m3", rpm)}
	c := startClusterWith(t, 3, window, clOptions{Redis: srv.Addr(), RedisTimeout: auditRedisTimeout}, tenants...)
	start := time.Now().Add(50 * time.Millisecond)
	done := make(chan []clResult)
	go func() { done <- c.loadAll(tenants, start, window/(2*rpm), 2*window) }()

	time.Sleep(window) // pacing: scrape in the middle of the load
	for _, nd := range c.live() {
		m, cv := c.scrape(nd), c.clusterOf(nd)
		active := 0
		for _, mb := range cv.Members {
			if mb.State == "active" {
				active++
			}
		}
		if got := m.get(`ringgate_ring_version`); got != float64(nd.Ring().Version()) {
			t.Errorf("%s: ringgate_ring_version %v, its ring is version %d", nd.Name(), got, nd.Ring().Version())
		}
		if got := m.get(`ringgate_members{state="active"}`); got != float64(active) || active != 3 {
			t.Errorf("%s: ringgate_members active %v, /cluster lists %d active", nd.Name(), got, active)
		}
		if got := m.get(`ringgate_configs_differ`); got != 0 {
			t.Errorf("%s: ringgate_configs_differ %v, /cluster says %v", nd.Name(), got, cv.ConfigsDiffer)
		}
	}

	res := <-done
	codes := answersOf(t, res)
	hopped := 0
	for _, r := range res {
		if r.via != c.owner(r.tenant) {
			hopped++
		}
	}
	allowed := map[string]float64{}
	var hops, redisOK, redisErr, redisTimed float64
	for _, nd := range c.live() {
		m := c.scrape(nd)
		for _, tn := range tenants {
			allowed[tn.Name] += m.count(fmt.Sprintf(`ringgate_decisions_total{result="allowed",tenant=%q}`, tn.Name))
		}
		hops += m.count(`ringgate_hops_total{result="answered"}`)
		redisOK += m.count(`ringgate_redis_calls_total{result="ok"}`)
		redisErr += m.count(`ringgate_redis_calls_total{result="error"}`)
		redisTimed += m.count(`ringgate_redis_call_seconds_count`)
		for _, series := range []string{`ringgate_handoff_tenants_total{source="peer"}`, `ringgate_handoff_seconds_count`, `ringgate_fallback_episodes_total`} {
			if m.get(series) < 0 {
				t.Errorf("%s: /metrics has no %s", nd.Name(), series)
			}
		}
	}
	t.Logf("answers %v; hops answered %v of %d sent to a non-owner; Redis calls ok %v, error %v (%v timed)", codes, hops, hopped, redisOK, redisErr, redisTimed)
	for _, tn := range tenants {
		got := float64(len(c.records(tn.Name)))
		t.Logf("%s: the nodes counted %v admitted, the provider saw %v", tn.Name, allowed[tn.Name], got)
		if got == 0 || math.Abs(allowed[tn.Name]-got) > 0.02*got {
			t.Errorf("%s: the nodes' ringgate_decisions_total{result=\"allowed\"} add up to %v, the provider saw %v (want within 2 %%)", tn.Name, allowed[tn.Name], got)
		}
	}
	// Every ringgate series a node serves is in the operators' table.
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for series := range c.scrape(c.live()[0]) {
		name := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(strings.SplitN(series, "{", 2)[0], "_bucket"), "_sum"), "_count")
		if strings.HasPrefix(name, "ringgate_") && !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("%s is served on /metrics and not in docs/operations.md", name)
		}
	}
	if hops != float64(hopped) {
		t.Errorf("ringgate_hops_total{result=\"answered\"} add up to %v, %d requests went to a node not owning their tenant", hops, hopped)
	}
	if redisOK == 0 || redisErr != 0 || redisTimed != redisOK+redisErr {
		t.Errorf("Redis calls: ok %v, error %v, timed %v; want some, none failed, each timed", redisOK, redisErr, redisTimed)
	}
}

// scraped is one /metrics page: each series as written ("name{labels}")
// to its value.
type scraped map[string]float64

// get is the series' value, or -1 when the page has no such series.
func (m scraped) get(series string) float64 {
	if v, ok := m[series]; ok {
		return v
	}
	return -1
}

// count is the series' value, 0 when the page has no such series (a
// labelled series appears at its first count).
func (m scraped) count(series string) float64 { return m[series] }

// scrape reads nd's /metrics.
func (c *clCluster) scrape(nd *clNode) scraped {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+nd.Addr()+"/metrics", nil)
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("metrics of %s: %v", nd.Name(), err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return parseMetrics(string(body))
}

// parseMetrics reads a /metrics page.
func parseMetrics(text string) scraped {
	m := scraped{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

// sum adds up every series of the metric name.
func (m scraped) sum(name string) float64 {
	total := 0.0
	for series, v := range m {
		if series == name || strings.HasPrefix(series, name+"{") {
			total += v
		}
	}
	return total
}
