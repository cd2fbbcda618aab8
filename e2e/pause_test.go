//go:build e2e

package e2e

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringgate/ringgate/internal/audit"
	"github.com/ringgate/ringgate/internal/redistest"
)

// TestHAProxyPausedOwner: three nodes behind HAProxy with Redis snapshots,
// every tenant driven at twice its limit; the node owning the most tenants
// is stopped with SIGSTOP and continued with SIGCONT. 7 s: past failure
// detection (its peers declare it dead and take its tenants over) and past
// hop_skew (5 s: the hops that waited in its backlog are stale when it reads
// them). 1.9 s: past the pause limit (1.6 s) but mostly before its peers
// remove it (2.2 s at the earliest): it catches up all the same, and keeps
// its own account of tenants nobody took over. When it runs again it must
// catch up before it decides anything (node/wake.go), and no hop it refuses
// may reach a client as 401. Asserted: no 401, no 5xx but 503 (with
// Retry-After), no transport error after one retry, at most 1.10 × the
// limit in any sliding window of the whole run, and the paused node's
// "wake" log lines.
func TestHAProxyPausedOwner(t *testing.T) {
	for _, d := range []time.Duration{7 * time.Second, 1900 * time.Millisecond} {
		t.Run(d.String(), func(t *testing.T) { runPausedOwner(t, d) })
	}
}

func runPausedOwner(t *testing.T, pauseFor time.Duration) {
	haproxyBin := needTool(t, "haproxy", "/usr/sbin/haproxy")
	needTool(t, "redis-server", "/usr/bin/redis-server", "/usr/local/bin/redis-server")
	srv := redistest.Start(t)
	sc := scenario{name: "paused owner", redis: srv.Addr(), snapshotInterval: 300 * time.Millisecond, handoffWait: 100 * time.Millisecond}
	dir := t.TempDir()
	ps := newProcs(t, dir)

	var fakeAddr string
	if _, err := ps.launch("fake-upstream", binary, 10*time.Second, func() ([]string, func() bool, error) {
		port, err := freePort(false)
		fakeAddr = addr(port)
		return []string{"fake-upstream", "-listen", fakeAddr, "-max-records", "0", "-latency", "50ms"},
			answers("http://"+fakeAddr+"/_records", http.StatusOK), err
	}); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	secret := base64.StdEncoding.EncodeToString(key)
	nodes := make([]*gwNode, 3)
	for i := range nodes {
		n := &gwNode{name: fmt.Sprintf("node-%d", i+1)}
		nodes[i] = n
		var join []string
		if i > 0 {
			join = []string{nodes[0].gossip}
		}
		err := ps.launchNode(n, 15*time.Second, func() string { return nodeConfig(n, join, secret, fakeAddr, sc) })
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := waitCluster(nodes, 3, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	front, _ := launchHAProxy(t, ps, haproxyBin, dir, nodes, func(st map[string]string) bool {
		return isUp(st["node-1"]) && isUp(st["node-2"]) && isUp(st["node-3"])
	})

	// The victim: the node that owns the most tenants.
	owners := map[string]string{}
	count := map[string]int{}
	for _, name := range tenantNames {
		code, body, err := get("http://" + nodes[0].listen + "/tenants/" + name)
		var tv struct{ Owner string }
		if err == nil && code == http.StatusOK {
			err = json.Unmarshal(body, &tv)
		}
		if err != nil || code != http.StatusOK || tv.Owner == "" {
			t.Fatalf("GET /tenants/%s: %d %v %s", name, code, err, body)
		}
		owners[name] = tv.Owner
		count[tv.Owner]++
	}
	victim := nodes[0]
	for _, n := range nodes {
		if count[n.name] > count[victim.name] {
			victim = n
		}
	}
	var owned []string
	for _, name := range tenantNames {
		if owners[name] == victim.name {
			owned = append(owned, name)
		}
	}
	t.Logf("owners %v; pausing %s (owns %v) for %v", owners, victim.name, owned, pauseFor)

	// Load: twice every tenant's limit through HAProxy, keep-alive on; the
	// client waits long enough for a request stuck on the stopped node.
	client := &http.Client{
		Timeout:   pauseFor + 10*time.Second,
		Transport: &http.Transport{MaxIdleConns: 8, MaxIdleConnsPerHost: 8, IdleConnTimeout: 30 * time.Second},
	}
	defer client.CloseIdleConnections()
	pl := &pauseLoad{statuses: map[int]int{}, codes: map[string]int{}}
	loadStart := time.Now()
	stopAt := loadStart.Add(2 * window)
	loadEnd := stopAt.Add(pauseFor + 3*window)
	url := "http://" + front + "/v1/chat/completions"
	var wg sync.WaitGroup
	for _, name := range tenantNames {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pl.drive(client, url, name, loadEnd)
		}()
	}
	time.Sleep(time.Until(stopAt))
	if err := victim.p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %s: %v", victim.name, err)
	}
	stopped := time.Now()
	// Meanwhile the others declare it dead and take its tenants over.
	time.Sleep(time.Until(stopped.Add(pauseFor)))
	if err := victim.p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT %s: %v", victim.name, err)
	}
	continued := time.Now()
	wg.Wait()
	rel := func(at time.Time) string { return fmt.Sprintf("%+.2fs", at.Sub(loadStart).Seconds()) }

	// What the provider received, per tenant, over the whole run.
	code, body, err := get("http://" + fakeAddr + "/_records")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /_records: %d %v", code, err)
	}
	var recs []record
	if err := json.Unmarshal(body, &recs); err != nil {
		t.Fatal(err)
	}
	byTenant := map[string][]time.Time{}
	for _, r := range recs {
		byTenant[r.tenant()] = append(byTenant[r.tenant()], r.Received)
	}
	bound := rpm + rpm/10
	for _, name := range tenantNames {
		ts := byTenant[name]
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		whole := audit.MaxIn(ts, window-measureSlack)
		full := audit.MaxIn(ts, window)
		t.Logf("tenant %-8s (owner %s): %3d reached the provider; max %d in any %v (from %s), %d in any %v; limit %d",
			name, owners[name], len(ts), whole.Count, window-measureSlack, rel(whole.First), full.Count, window, rpm)
		if whole.Count > bound {
			t.Errorf("tenant %s: %d requests reached the provider within %v from %s; at most %d (1.10 × %d) allowed",
				name, whole.Count, window-measureSlack, rel(whole.First), bound, rpm)
		}
	}

	// The paused node's account, and its peers'.
	vlog := victim.p.log()
	paused, caught := logLines(vlog, "wake"), []string{}
	for _, l := range paused {
		if strings.Contains(l, `"phase":"caught_up"`) {
			caught = append(caught, l)
		}
	}
	t.Logf("%s stopped at %s, continued at %s; its wake log:\n%s", victim.name, rel(stopped), rel(continued), strings.Join(paused, "\n"))
	if len(paused) == 0 || len(caught) == 0 {
		t.Errorf(`%s logged no "msg":"wake" paused and caught_up lines`, victim.name)
	}
	for _, n := range nodes {
		for _, r := range parseRebalances(n.p.log()) {
			if !r.Time.Before(loadStart) {
				t.Logf("rebalance %s at %s: members %v moved %v; handed over %d, took over %d, state %v, handoff %d ms",
					n.name, rel(r.Time), r.Members, r.MovedTenants, r.HandedOver, r.TakenOver, r.State, r.HandoffMS)
			}
		}
		if n != victim {
			if l := logLines(n.p.log(), "hop_refused_by_owner"); len(l) > 0 {
				t.Logf("%s: %d hops refused by their owner, first: %s", n.name, len(l), l[0])
			}
		}
	}

	pl.mu.Lock()
	defer pl.mu.Unlock()
	t.Logf("client: statuses %v, codes of the others %v, transport errors %d (still failing after one retry: %d); slowest answer %v",
		pl.statuses, pl.codes, pl.transportErrs, pl.transportFailed, pl.slowest.Round(time.Millisecond))
	for _, s := range pl.samples {
		t.Logf("answer: %s", s)
	}
	if n := pl.statuses[http.StatusUnauthorized]; n > 0 {
		t.Errorf("%d answers 401: a refused hop reached its client", n)
	}
	for st, n := range pl.statuses {
		if st != http.StatusOK && st != http.StatusTooManyRequests && st != http.StatusServiceUnavailable {
			t.Errorf("%d answers with HTTP %d; only 200, 429 and 503 are expected", n, st)
		}
	}
	if pl.noRetryAfter > 0 {
		t.Errorf("%d answers 503 without Retry-After", pl.noRetryAfter)
	}
	if pl.transportFailed > 0 {
		t.Errorf("%d requests failed at the transport level even after one retry", pl.transportFailed)
	}
	if len(recs) != pl.statuses[http.StatusOK] {
		t.Errorf("the provider saw %d requests but clients got %d answers 200", len(recs), pl.statuses[http.StatusOK])
	}
}

// pauseLoad drives the tenants and counts what the clients saw, error codes
// included.
type pauseLoad struct {
	mu              sync.Mutex
	statuses        map[int]int
	codes           map[string]int // "503 not_ready", ...
	noRetryAfter    int
	transportErrs   int
	transportFailed int
	slowest         time.Duration
	samples         []string
	seq             int
}

func (l *pauseLoad) drive(c *http.Client, url, tenant string, end time.Time) {
	sem := make(chan struct{}, 4*perTenantCap) // requests stuck on the stopped node hold their place
	tick := time.NewTicker(window / (2 * rpm))
	defer tick.Stop()
	var wg sync.WaitGroup
	for now := range tick.C {
		if !now.Before(end) {
			break
		}
		select {
		case sem <- struct{}{}:
		default:
			continue
		}
		l.mu.Lock()
		l.seq++
		user := fmt.Sprintf("%s#%d", tenant, l.seq)
		l.mu.Unlock()
		body := fmt.Sprintf(`{"model":"gpt-4o-mini","user":%q,"max_tokens":50,"messages":[{"role":"user","content":"Say hello to %s, briefly."}]}`, user, tenant)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			l.one(c, url, tenant, body)
		}()
	}
	wg.Wait()
}

func (l *pauseLoad) one(c *http.Client, url, tenant, body string) {
	for attempt := range 2 {
		sent := time.Now()
		resp, b, err := postChat(c, url, tenant, body)
		l.mu.Lock()
		if err != nil {
			if attempt == 0 {
				l.transportErrs++
			} else {
				l.transportFailed++
			}
			if len(l.samples) < 12 {
				l.samples = append(l.samples, fmt.Sprintf("%s attempt %d: %v", tenant, attempt+1, err))
			}
			l.mu.Unlock()
			continue
		}
		took := time.Since(sent)
		l.slowest = max(l.slowest, took)
		l.statuses[resp.StatusCode]++
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
			var e struct {
				Error struct{ Code string } `json:"error"`
			}
			_ = json.Unmarshal(b, &e)
			l.codes[fmt.Sprintf("%d %s", resp.StatusCode, e.Error.Code)]++
			if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
				l.noRetryAfter++
			}
			if len(l.samples) < 12 {
				l.samples = append(l.samples, fmt.Sprintf("%s at %s after %v: HTTP %d node %q: %.200s", tenant,
					time.Now().Format("15:04:05.000"), took.Round(time.Millisecond), resp.StatusCode, resp.Header.Get("x-ringgate-node"), b))
			}
		}
		l.mu.Unlock()
		return
	}
}
