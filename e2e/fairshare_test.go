//go:build e2e

package e2e

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/internal/redistest"
	"github.com/ringgate/ringgate/ring"
)

// TestHAProxyFairShares is the black-box measurement: three ringgate
// processes leasing from Redis behind HAProxy, the fake provider enforcing
// rpm 150 a window, three tenants with no limits of their own each sending
// twice its fair share through HAProxy, two of them owned by one node and
// one by another (their names picked by the nodes' own ring over node-1..3).
// What the provider admitted of each over the windows after the first must
// be within 10 % of a third, with no refusal by the provider. Before the
// division, the lone tenant got 2.2–2.4× each of the others (the issue).
func TestHAProxyFairShares(t *testing.T) {
	haproxyBin := needTool(t, "haproxy", "/usr/sbin/haproxy")
	needTool(t, "redis-server", "/usr/bin/redis-server", "/usr/local/bin/redis-server")
	const (
		win   = 2 * time.Second
		limit = 150
		runs  = 5 // windows of load
	)
	srv := redistest.Start(t)
	dir := t.TempDir()
	ps := newProcs(t, dir)

	var fakeAddr string
	if _, err := ps.launch("fake-upstream", binary, 10*time.Second, func() ([]string, func() bool, error) {
		port, err := freePort(false)
		fakeAddr = addr(port)
		// The provider's window less a bucket and the loopback's jitter:
		// a line's requests go the instant a bucket leaves the window.
		pw := win - win/128 - 30*time.Millisecond
		return []string{"fake-upstream", "-listen", fakeAddr, "-max-records", "0", "-latency", "5ms",
				"-rpm", fmt.Sprint(limit), "-window", pw.String()},
			answers("http://"+fakeAddr+"/_records", http.StatusOK), err
	}); err != nil {
		t.Fatal(err)
	}

	names := []string{"node-1", "node-2", "node-3"}
	tenants := placed(t, names, []string{"node-1", "node-1", "node-2"})
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	secret := base64.StdEncoding.EncodeToString(key)
	nodes := make([]*gwNode, 3)
	for i := range nodes {
		nodes[i] = &gwNode{name: names[i]}
		var join []string
		if i > 0 {
			join = []string{fmt.Sprintf("%q", nodes[0].gossip)}
		}
		n := nodes[i]
		if err := ps.launchNode(n, 15*time.Second, func() string {
			return fairNodeConfig(n, join, secret, srv.Addr(), fakeAddr, win, limit, tenants)
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitCluster(nodes, 3, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	front, _ := launchHAProxy(t, ps, haproxyBin, dir, nodes, func(st map[string]string) bool {
		return isUp(st["node-1"]) && isUp(st["node-2"]) && isUp(st["node-3"])
	})

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	url := "http://" + front + "/v1/chat/completions"
	start := time.Now().Add(50 * time.Millisecond)
	end := start.Add(runs * win)
	interval := win / (2 * limit / 3) // each twice a third of the limit
	var wg sync.WaitGroup
	codes := map[int]int{}
	var mu sync.Mutex
	for i, tn := range tenants {
		wg.Go(func() {
			sem := make(chan struct{}, 128)
			var calls sync.WaitGroup
			for at := start.Add(time.Duration(i) * interval / 3); at.Before(end); at = at.Add(interval) {
				time.Sleep(time.Until(at)) // pacing, not waiting for a condition
				sem <- struct{}{}
				calls.Go(func() {
					defer func() { <-sem }()
					body := fmt.Sprintf(`{"model":"gpt-4o-mini","user":%q,"max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`, tn)
					resp, _, err := postChat(client, url, tn, body)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						codes[-1]++
						return
					}
					codes[resp.StatusCode]++
				})
			}
			calls.Wait()
		})
	}
	wg.Wait()

	code, body, err := get("http://" + fakeAddr + "/_records")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /_records: %d %v", code, err)
	}
	var recs []struct {
		Received    time.Time `json:"received"`
		User        string    `json:"user"`
		RateLimited bool      `json:"rate_limited"`
	}
	if err := json.Unmarshal(body, &recs); err != nil {
		t.Fatalf("GET /_records: %v", err)
	}
	got := make([]float64, len(tenants))
	refused := 0
	for _, r := range recs {
		if r.Received.Before(start.Add(win)) || !r.Received.Before(end) {
			continue
		}
		if r.RateLimited {
			refused++
			continue
		}
		for i, tn := range tenants {
			if r.User == tn {
				got[i]++
			}
		}
	}
	var sum, s2 float64
	for _, g := range got {
		sum += g
		s2 += g * g
	}
	if sum == 0 {
		t.Fatalf("the provider admitted nothing after the first window; answers %v", codes)
	}
	jain := sum * sum / (float64(len(got)) * s2)
	t.Logf("answers %v; admitted by the provider over the %d windows after the first: %v (tenants %v on node-1, node-1, node-2), Jain %.3f; %d refused by the provider",
		codes, runs-1, got, tenants, jain, refused)
	if refused > 0 {
		t.Errorf("the provider refused %d requests for its own limit", refused)
	}
	if codes[-1] > 0 || codes[http.StatusInternalServerError]+codes[http.StatusBadGateway]+codes[http.StatusServiceUnavailable] > 0 {
		t.Errorf("answers other than 200 and 429: %v", codes)
	}
	for i, g := range got {
		if math.Abs(g/sum-1.0/3) > 0.1/3 {
			t.Errorf("tenant %s (on %s) got %.3f of what the provider admitted, want 0.333 ± 10 %%", tenants[i], []string{"node-1", "node-1", "node-2"}[i], g/sum)
		}
	}
	if jain < 0.98 {
		t.Errorf("Jain's index %.3f, want ≥ 0.98", jain)
	}
}

// placed picks tenant names the ring of members places as wanted.
func placed(t *testing.T, members, owners []string) []string {
	t.Helper()
	r := ring.New(1, members)
	var out []string
	next := 0
	for _, want := range owners {
		for ; ; next++ {
			if next > 10000 {
				t.Fatalf("no tenant name owned by %s", want)
			}
			name := fmt.Sprintf("fair-%d", next)
			if o, _ := r.Owner(name); o == want {
				out = append(out, name)
				next++
				break
			}
		}
	}
	return out
}

// fairNodeConfig is a node of TestHAProxyFairShares: Redis for the leases,
// the default queue (refused requests wait up to 2 s), an upstream limited
// to limit requests a window, and the tenants with no limits of their own.
func fairNodeConfig(n *gwNode, join []string, secret, redis, fake string, win time.Duration, limit int, tenants []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `[node]
name = %q
listen = %q
gossip = %q
join = [%s]

[cluster]
secret = %q

[redis]
addr = %q
timeout = "100ms"

[limits]
window = %q

[queue]
interactive_wait = "2s"

[[upstreams]]
name = "fake"
kind = "openai"
base_url = "http://%s"
models = ["gpt-4o-mini"]
rpm = %d
`, n.name, n.listen, n.gossip, strings.Join(join, ", "), secret, redis, win.String(), fake, limit)
	for _, tn := range tenants {
		fmt.Fprintf(&b, "\n[[tenants]]\nname = %q\nkeys = [%q]\n", tn, "sk-"+tn)
	}
	return b.String()
}
