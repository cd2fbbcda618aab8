//go:build e2e

package e2e

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringgate/ringgate/internal/audit"
)

const (
	window       = 3 * time.Second  // limits.window: rpm is "per 3 s" here
	rpm          = 30               // every tenant's request limit per window
	drainTimeout = 10 * time.Second // node.drain_timeout
	loadWindows  = 7                // length of the load, in windows
	upAt         = 2                // scale-up (node-4 starts) after this many windows
	drainAt      = 4                // node-2 gets SIGTERM after this many windows
	perTenantCap = 8                // requests of one tenant in flight at most
	// measureSlack is how much shorter than a window the asserted intervals
	// are, for the jitter between admission and the provider's receive time.
	measureSlack = 20 * time.Millisecond
)

var tenantNames = []string{"acme", "globex", "initech", "umbrella"}

// gwNode is one ringgate node process and its addresses.
type gwNode struct {
	name   string
	listen string // HTTP host:port; fixed up front when HAProxy must know it first
	gossip string
	p      *proc
}

// TestHAProxyScaleUpAndDrain runs a fake provider, three ringgate nodes and
// HAProxy (TCP mode, HTTP health checks on /readyz, a fourth server line for
// a node not started yet) as real processes, and drives every tenant at twice
// its request limit through HAProxy for a few windows. Meanwhile a fourth node
// joins (scale-up) and node-2 is drained with SIGTERM. It checks that clients
// only ever see 200 or 429, that the drained node exits 0 within its drain
// timeout, that the logs show the drain and the rebalances, and that, while
// membership is stable, no tenant got more than its limit through to the
// provider in any sliding window. Without Redis a ring change may let a
// tenant's new owner start from a fresh window: the whole run's most per
// window is logged, not asserted.
func TestHAProxyScaleUpAndDrain(t *testing.T) {
	compare.add(t, runScaleUpAndDrain(t, scenario{name: "without Redis"}))
}

// scenario is what differs between the runs of the scale-up-and-drain test.
type scenario struct {
	name string
	// redis is the nodes' redis.addr ("" = no Redis); with it, the nodes
	// save snapshots every snapshotInterval and a new owner waits at most
	// handoffWait for the previous owner's final snapshot.
	redis            string
	snapshotInterval time.Duration
	handoffWait      time.Duration
}

// outcome is what one run of the scenario measured, for the checks that
// only some scenarios make.
type outcome struct {
	sc         scenario
	loadStart  time.Time
	nodes      []*gwNode
	ev         *events
	ld         *load
	recs       []record
	byTenant   map[string][]time.Time   // provider receive times, sorted
	whole      map[string]audit.Window  // whole run, full window
	wholeSlack map[string]audit.Window  // whole run, window - measureSlack
	closest    map[string]time.Duration // whole run: shortest span of rpm+1 arrivals
	rebalances map[string][]rebalance   // per node
	upZone     span
	drainZone  span
	metrics    map[string]map[string]float64 // per node: ringgate_snapshot_* at the end (node-2: during its drain)
}

func (o *outcome) rel(at time.Time) string {
	if at.IsZero() {
		return "never"
	}
	return fmt.Sprintf("%+.2fs", at.Sub(o.loadStart).Seconds())
}

// runScaleUpAndDrain runs the scenario and makes the checks every variant
// shares (see TestHAProxyScaleUpAndDrain), then returns what it measured.
func runScaleUpAndDrain(t *testing.T, sc scenario) *outcome {
	haproxyBin := needTool(t, "haproxy", "/usr/sbin/haproxy")
	begin := time.Now()
	t.Logf("scenario: %s (redis.addr %q, snapshot_interval %s, handoff_wait %s)", sc.name, sc.redis, sc.snapshotInterval, sc.handoffWait)
	dir := t.TempDir()
	ps := newProcs(t, dir)

	// The fake provider.
	var fakeAddr string
	_, err := ps.launch("fake-upstream", binary, 10*time.Second, func() ([]string, func() bool, error) {
		port, err := freePort(false)
		fakeAddr = addr(port)
		// Some latency keeps requests in flight: the drain has to wait
		// for them, and the client needs more connections at times.
		return []string{"fake-upstream", "-listen", fakeAddr, "-max-records", "0", "-latency", "50ms"},
			answers("http://"+fakeAddr+"/_records", http.StatusOK), err
	})
	if err != nil {
		t.Fatal(err)
	}

	// Three nodes; node-4's HTTP port is fixed now, as HAProxy lists it.
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	secret := base64.StdEncoding.EncodeToString(key)
	nodes := make([]*gwNode, 4)
	for i := range nodes {
		nodes[i] = &gwNode{name: fmt.Sprintf("node-%d", i+1)}
	}
	port4, err := freePort(false)
	if err != nil {
		t.Fatal(err)
	}
	nodes[3].listen = addr(port4)
	startNode := func(n *gwNode, join []string) error {
		return ps.launchNode(n, 15*time.Second, func() string { return nodeConfig(n, join, secret, fakeAddr, sc) })
	}
	for i, n := range nodes[:3] {
		var join []string
		if i > 0 {
			join = []string{nodes[0].gossip}
		}
		if err := startNode(n, join); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitCluster(nodes[:3], 3, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	// HAProxy in front of all four server lines.
	front, stats := launchHAProxy(t, ps, haproxyBin, dir, nodes, func(st map[string]string) bool {
		return isUp(st["node-1"]) && isUp(st["node-2"]) && isUp(st["node-3"]) && strings.HasPrefix(st["node-4"], "DOWN")
	})
	t.Logf("setup took %s: fake %s, haproxy %s (stats %s), nodes %s %s %s, node-4 later at %s",
		time.Since(begin).Round(time.Millisecond), fakeAddr, front, stats,
		nodes[0].listen, nodes[1].listen, nodes[2].listen, nodes[3].listen)

	// Load through HAProxy, and the membership changes meanwhile.
	// Keep-alives on, as real clients have them; a small idle pool makes
	// the client open new connections now and then, which HAProxy spreads
	// over the servers it has up (node-4 too, once it is).
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConns: 4, MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second},
	}
	defer client.CloseIdleConnections()
	ld := newLoad()
	loadStart := time.Now()
	loadEnd := loadStart.Add(loadWindows * window)
	ev := &events{metricsOf: func(n *gwNode) map[string]float64 {
		if sc.redis == "" {
			return nil
		}
		return snapshotMetrics(n.listen)
	}}
	evDone := make(chan struct{})
	go func() {
		defer close(evDone)
		ev.run(loadStart, nodes, startNode, stats)
	}()
	var wg sync.WaitGroup
	url := "http://" + front + "/v1/chat/completions"
	for _, name := range tenantNames {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ld.drive(client, url, name, loadEnd)
		}()
	}
	wg.Wait()
	loadStop := time.Now()
	<-evDone
	out := &outcome{sc: sc, loadStart: loadStart, nodes: nodes, ev: ev, ld: ld, metrics: map[string]map[string]float64{}}
	if sc.redis != "" {
		if ev.drainMetrics != nil {
			out.metrics[nodes[1].name] = ev.drainMetrics
		}
		for _, n := range nodes {
			if n.p != nil && !n.p.exited() {
				out.metrics[n.name] = snapshotMetrics(n.listen)
			}
		}
	}

	// What reached the provider.
	code, body, err := get("http://" + fakeAddr + "/_records")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /_records: %d %v", code, err)
	}
	var recs []record
	if err := json.Unmarshal(body, &recs); err != nil {
		t.Fatalf("GET /_records: %v", err)
	}

	out.recs = recs
	rel := out.rel

	// Membership changes: from the action to the last rebalance it caused
	// on any node, as the nodes logged it.
	rebalances := map[string][]rebalance{}
	for _, n := range nodes {
		if n.p != nil {
			rebalances[n.name] = parseRebalances(n.p.log())
		}
	}
	lastRebalance := func(from, to time.Time) time.Time {
		var last time.Time
		for _, rs := range rebalances {
			for _, r := range rs {
				if !r.Time.Before(from) && r.Time.Before(to) && r.Time.After(last) {
					last = r.Time
				}
			}
		}
		return last
	}
	far := loadStart.Add(time.Hour)
	upZone := span{ev.upStart, latest(ev.upReady, ev.upConverged, lastRebalance(ev.upStart, ev.drainStart))}
	drainZone := span{ev.drainStart, latest(lastRebalance(ev.drainStart, far), ev.drainStart)}
	out.rebalances, out.upZone, out.drainZone = rebalances, upZone, drainZone
	t.Logf("timeline (from load start): node-4 started %s, ready %s, all list 4 members %s, HAProxy marks it UP %s; "+
		"node-2 SIGTERM %s, HAProxy marks it DOWN %s, exited %s (code %d); load stopped %s",
		rel(ev.upStart), rel(ev.upReady), rel(ev.upConverged), rel(ev.upHAProxy),
		rel(ev.drainStart), rel(ev.drainHAProxyDown), rel(ev.drainExit), ev.drainCode, rel(loadStop))
	for _, n := range nodes {
		for _, r := range rebalances[n.name] {
			if !r.Time.Before(loadStart) {
				t.Logf("rebalance %s at %s: ring v%d members %v moved %v; handed over %d, took over %d, state %v, handoff %d ms%s",
					n.name, rel(r.Time), r.RingVersion, r.Members, r.MovedTenants, r.HandedOver, r.TakenOver, r.State, r.HandoffMS, r.flushNote())
			}
		}
	}

	// Client side.
	ld.mu.Lock()
	t.Logf("client: statuses %v (per tenant %v), answered by %v; transport errors %d (of which still failing after one retry: %d), "+
		"not sent because %d of a tenant were in flight: %d",
		ld.statuses, ld.perTenant, ld.byNode, ld.transportErrs, ld.transportFailed, perTenantCap, ld.skipped)
	for _, s := range ld.transportSamples {
		t.Logf("transport error: %s", s)
	}
	for st, n := range ld.statuses {
		if st != http.StatusOK && st != http.StatusTooManyRequests {
			t.Errorf("%d answers with HTTP %d; only 200 and 429 are expected", n, st)
		}
	}
	for _, s := range ld.badSamples {
		t.Logf("unexpected answer: %s", s)
	}
	if ld.transportFailed > 0 {
		t.Errorf("%d requests failed at the transport level even after one retry", ld.transportFailed)
	}
	ok200 := ld.statuses[http.StatusOK]
	ld.mu.Unlock()
	if sessions, err := haproxyColumn(stats, "stot"); err == nil {
		t.Logf("HAProxy client connections per node (stot): %v", sessions)
	}

	// Provider side: per tenant, requests in every sliding window.
	byTenant := map[string][]time.Time{}
	for _, r := range recs {
		byTenant[r.tenant()] = append(byTenant[r.tenant()], r.Received)
	}
	out.byTenant = byTenant
	out.whole, out.wholeSlack, out.closest = map[string]audit.Window{}, map[string]audit.Window{}, map[string]time.Duration{}
	t.Logf("provider: %d requests recorded, clients got %d × 200", len(recs), ok200)
	if len(recs) != ok200 {
		t.Errorf("the provider saw %d requests but clients got %d answers 200", len(recs), ok200)
	}
	margin := 100 * time.Millisecond // gossip/log skew around a ring change
	precise := []span{upZone.widen(margin), drainZone.widen(margin)}
	wide := []span{upZone.widen(window), drainZone.widen(window)}
	t.Logf("ring changes: scale-up %s..%s, drain %s..%s", rel(upZone.from), rel(upZone.to), rel(drainZone.from), rel(drainZone.to))
	for _, name := range tenantNames {
		ts := byTenant[name]
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		all := audit.MaxIn(ts, window)
		out.whole[name], out.wholeSlack[name] = all, audit.MaxIn(ts, window-measureSlack)
		out.closest[name] = tightest(ts, rpm, nil)
		stable, stableN := audit.MaxInWhere(ts, window, outside(window, precise))
		stableWide, stableWideN := audit.MaxInWhere(ts, window, outside(window, wide))
		t.Logf("tenant %-8s: %3d reached the provider; max per sliding %s: whole run %d (at %s; %d within %s), "+
			"stable membership %d (at %s, %d intervals; %d requests never closer than %s), stable ±1 window %d (%d intervals); limit %d",
			name, len(ts), window, all.Count, rel(all.First), out.wholeSlack[name].Count, window-measureSlack, stable.Count, rel(stable.First), stableN,
			rpm+1, tightest(ts, rpm, precise).Round(time.Millisecond), stableWide.Count, stableWideN, rpm)
		if len(ts) == 0 {
			t.Errorf("tenant %s: nothing reached the provider", name)
		}
		// The provider's receive times trail the gateway's admissions by a
		// few variable milliseconds (HAProxy, maybe a hop, scheduling), so
		// the check allows measureSlack: a real breach (a second window,
		// a double admission) puts the extra request well inside the window.
		// Over the whole run, the scale-up and the drain included: the
		// state moves peer to peer, no Redis needed.
		if strict := audit.MaxIn(ts, window-measureSlack); strict.Count > rpm {
			t.Errorf("tenant %s: %d requests reached the provider within %s from %s (ring changes at %s and %s); the limit is %d per %s",
				name, strict.Count, window-measureSlack, rel(strict.First), rel(upZone.from), rel(drainZone.from), rpm, window)
		}
	}

	// The drain and the logs.
	if ev.upErr != nil {
		t.Errorf("scale-up: %v", ev.upErr)
	}
	if ev.drainErr != nil {
		t.Errorf("drain: %v", ev.drainErr)
	} else if ev.drainCode != 0 {
		t.Errorf("node-2 exited with code %d after SIGTERM; want 0", ev.drainCode)
	}
	if lines := logLines(nodes[1].p.log(), "drain"); len(lines) == 0 {
		t.Errorf(`node-2's log has no "msg":"drain" line`)
	} else {
		t.Logf("node-2 drain log:\n%s", strings.Join(lines, "\n"))
	}
	for _, n := range []*gwNode{nodes[0], nodes[2], nodes[3]} {
		if n.p == nil {
			continue // scale-up failed, reported above
		}
		if len(logLines(n.p.log(), "rebalance")) == 0 {
			t.Errorf(`%s's log has no "msg":"rebalance" line`, n.name)
		}
		if n.p.exited() {
			t.Errorf("%s exited during the test: %v", n.name, n.p.err)
		}
	}
	if len(out.metrics) > 0 {
		t.Logf("snapshot store counters (node-2's during its drain, the others' at the end): %v", out.metrics)
	}
	t.Logf("wall time so far %s", time.Since(begin).Round(time.Millisecond))
	return out
}

// redisConfig is the [redis] section's keys for the scenario.
func redisConfig(sc scenario) string {
	if sc.redis == "" {
		return "addr = \"\"\n"
	}
	return fmt.Sprintf("addr = %q\nsnapshot_interval = %q\nhandoff_wait = %q\n", sc.redis, sc.snapshotInterval.String(), sc.handoffWait.String())
}

// snapshotMetrics reads a node's ringgate_snapshot_* counters from
// /metrics (nil when it does not answer).
func snapshotMetrics(listen string) map[string]float64 {
	code, body, err := get("http://" + listen + "/metrics")
	if err != nil || code != http.StatusOK {
		return nil
	}
	out := map[string]float64{}
	for line := range strings.Lines(string(body)) {
		name, val, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || !strings.HasPrefix(name, "ringgate_snapshot_") {
			continue
		}
		var f float64
		if _, err := fmt.Sscan(val, &f); err == nil {
			out[strings.TrimSuffix(strings.TrimPrefix(name, "ringgate_snapshot_"), "_total")] = f
		}
	}
	return out
}

// nodeConfig is the config.toml of one node.
func nodeConfig(n *gwNode, join []string, secret, fake string, sc scenario) string {
	quoted := make([]string, len(join))
	for i, j := range join {
		quoted[i] = fmt.Sprintf("%q", j)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `[node]
name = %q
listen = %q
gossip = %q
join = [%s]
drain_timeout = %q

[cluster]
secret = %q

[admin]
token = ""

[redis]
%s
[limits]
window = %q

# These tests count the limits under churn: refusals answer at once.
[queue]
interactive_wait = "0s"
batch_wait = "0s"

[[upstreams]]
name = "fake"
kind = "openai"
base_url = "http://%s"
api_key = "sk-upstream"
models = ["gpt-4o-mini"]
`, n.name, n.listen, n.gossip, strings.Join(quoted, ", "), drainTimeout.String(), secret, redisConfig(sc), window.String(), fake)
	for _, name := range tenantNames {
		fmt.Fprintf(&b, `
[[tenants]]
name = %q
keys = [%q]
rpm = %d
tpm = 100000000
concurrency = 1000
priority = "interactive"
`, name, "sk-"+name, rpm)
	}
	// A tenant whose team allows one request a window (the SDK's
	// RateLimitError on a team limit).
	b.WriteString(`
[[teams]]
name = "crew"
rpm = 1

[[tenants]]
name = "crewmate"
keys = ["sk-crewmate"]
rpm = 1000
team = "crew"
`)
	return b.String()
}

// haproxyConfig is the HAProxy recipe users run (deploy/haproxy/haproxy.cfg:
// TCP mode, each node's /readyz checked, a stats page the test reads server
// states from), with the test's front and stats addresses and its nodes.
func haproxyConfig(front, stats string, nodes []*gwNode) string {
	recipe, err := os.ReadFile(filepath.Join("..", "deploy", "haproxy", "haproxy.cfg"))
	if err != nil {
		panic(fmt.Sprintf("the HAProxy recipe: %v", err))
	}
	var b strings.Builder
	section, servers := "", false
	for _, line := range strings.Split(string(recipe), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "listen":
			section = f[1]
		case len(f) == 2 && f[0] == "bind" && section == "gw":
			line = "    bind " + front
		case len(f) == 2 && f[0] == "bind" && section == "stats":
			line = "    bind " + stats
		case len(f) > 0 && f[0] == "server" && servers:
			continue
		case len(f) > 0 && f[0] == "server":
			// The test's nodes where the recipe's are (after its
			// default-server line, which they take).
			servers = true
			var lines []string
			for _, n := range nodes {
				lines = append(lines, fmt.Sprintf("    server %s %s", n.name, n.listen))
			}
			line = strings.Join(lines, "\n")
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// launchHAProxy starts HAProxy in front of nodes (haproxyConfig) on fresh
// ports, and waits until ready says the servers' states are as wanted.
func launchHAProxy(t *testing.T, ps *procs, bin, dir string, nodes []*gwNode, ready func(status map[string]string) bool) (front, stats string) {
	t.Helper()
	_, err := ps.launch("haproxy", bin, 10*time.Second, func() ([]string, func() bool, error) {
		fp, err := freePort(false)
		if err != nil {
			return nil, nil, err
		}
		sp, err := freePort(false)
		if err != nil {
			return nil, nil, err
		}
		front, stats = addr(fp), addr(sp)
		cfg := filepath.Join(dir, "haproxy.cfg")
		if err := os.WriteFile(cfg, []byte(haproxyConfig(front, stats, nodes)), 0o600); err != nil {
			return nil, nil, err
		}
		return []string{"-f", cfg, "-db"}, func() bool {
			st, err := haproxyStatus(stats)
			return err == nil && ready(st)
		}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return front, stats
}

// haproxyStatus reads the status column of the gw servers from the CSV
// stats ("UP", "DOWN", "UP 1/2", …).
func haproxyStatus(stats string) (map[string]string, error) {
	return haproxyColumn(stats, "status")
}

// haproxyColumn reads one column of the gw servers' CSV stats.
func haproxyColumn(stats, column string) (map[string]string, error) {
	code, body, err := get("http://" + stats + "/stats;csv")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("stats: HTTP %d", code)
	}
	rows, err := csv.NewReader(strings.NewReader(strings.TrimPrefix(string(body), "# "))).ReadAll()
	if err != nil || len(rows) == 0 {
		return nil, fmt.Errorf("stats: %v", err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	px, sv, stc := col["pxname"], col["svname"], col[column]
	out := map[string]string{}
	for _, r := range rows[1:] {
		if len(r) > stc && r[px] == "gw" && r[sv] != "FRONTEND" && r[sv] != "BACKEND" {
			out[r[sv]] = r[stc]
		}
	}
	return out, nil
}

func isUp(status string) bool { return strings.HasPrefix(status, "UP") }

// waitCluster waits until every node's GET /cluster lists want active members.
func waitCluster(nodes []*gwNode, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var bad []string
		for _, n := range nodes {
			code, body, err := get("http://" + n.listen + "/cluster")
			var cv struct {
				Members []struct{ Name, State string } `json:"members"`
			}
			if err == nil && code == http.StatusOK {
				err = json.Unmarshal(body, &cv)
			}
			active := 0
			for _, m := range cv.Members {
				if m.State == "active" {
					active++
				}
			}
			if err != nil || code != http.StatusOK || len(cv.Members) != want || active != want {
				bad = append(bad, fmt.Sprintf("%s: HTTP %d %v %s", n.name, code, err, body))
			}
		}
		if len(bad) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster of %d not formed after %s: %s", want, timeout, strings.Join(bad, "; "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// events is the scale-up and the drain, run during the load.
type events struct {
	upStart, upReady, upConverged, upHAProxy time.Time
	upErr                                    error

	drainStart, drainHAProxyDown, drainExit time.Time
	drainCode                               int
	drainErr                                error

	// metricsOf, if set, reads a node's counters; node-2's are read during
	// its drain, after it has handed its tenants over.
	metricsOf    func(*gwNode) map[string]float64
	drainMetrics map[string]float64
}

func (ev *events) run(loadStart time.Time, nodes []*gwNode, startNode func(*gwNode, []string) error, stats string) {
	time.Sleep(time.Until(loadStart.Add(upAt * window)))
	ev.upStart = time.Now()
	if err := startNode(nodes[3], []string{nodes[0].gossip}); err != nil {
		ev.upErr = err
	} else {
		ev.upReady = time.Now()
		if err := waitCluster(nodes, 4, 5*time.Second); err != nil {
			ev.upErr = err
		} else {
			ev.upConverged = time.Now()
		}
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if st, err := haproxyStatus(stats); err == nil && isUp(st["node-4"]) {
				ev.upHAProxy = time.Now()
				break
			}
		}
		if ev.upHAProxy.IsZero() && ev.upErr == nil {
			ev.upErr = fmt.Errorf("HAProxy did not mark node-4 UP within 3s of it being ready")
		}
	}

	time.Sleep(time.Until(loadStart.Add(drainAt * window)))
	n2 := nodes[1].p
	ev.drainStart = time.Now()
	if err := n2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		ev.drainErr = err
		return
	}
	deadline := ev.drainStart.Add(drainTimeout + 5*time.Second)
	for !n2.exited() && time.Now().Before(deadline) {
		if ev.drainHAProxyDown.IsZero() {
			if st, err := haproxyStatus(stats); err == nil && strings.HasPrefix(st["node-2"], "DOWN") {
				ev.drainHAProxyDown = time.Now()
			}
		}
		if ev.metricsOf != nil && ev.drainMetrics == nil && time.Since(ev.drainStart) > 500*time.Millisecond {
			if m := ev.metricsOf(nodes[1]); m != nil {
				ev.drainMetrics = m
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, ok := n2.waitExit(0)
	if !ok {
		ev.drainErr = fmt.Errorf("node-2 still running %s after SIGTERM (drain_timeout %s)", drainTimeout+5*time.Second, drainTimeout)
		return
	}
	ev.drainExit = time.Now()
	ev.drainCode = code
}

// load drives the tenants and counts what the clients saw.
type load struct {
	mu               sync.Mutex
	statuses         map[int]int
	perTenant        map[string]map[int]int
	byNode           map[string]int // x-ringgate-node of the 200s
	transportErrs    int            // first attempts that failed below HTTP
	transportFailed  int            // … and whose retry failed too
	skipped          int
	transportSamples []string
	badSamples       []string
	seq              int
	answered         map[string]answer // by the request's "user" (tenant#seq): its last answer
}

// answer is what the client saw of one request.
type answer struct {
	status     int
	node       string // x-ringgate-node: the node that enforced the limit
	sent, done time.Time
}

func newLoad() *load {
	return &load{statuses: map[int]int{}, perTenant: map[string]map[int]int{}, byNode: map[string]int{}, answered: map[string]answer{}}
}

// drive sends the tenant's requests at twice its limit until end, at most
// perTenantCap in flight; it returns once all of them are answered.
func (l *load) drive(c *http.Client, url, tenant string, end time.Time) {
	sem := make(chan struct{}, perTenantCap)
	tick := time.NewTicker(window / (2 * rpm))
	defer tick.Stop()
	var wg sync.WaitGroup
	for now := range tick.C {
		if !now.Before(end) {
			break
		}
		select {
		case sem <- struct{}{}:
			// "user" names the tenant and the request, so the provider's
			// records can be matched with the answers.
			l.mu.Lock()
			l.seq++
			user := fmt.Sprintf("%s#%d", tenant, l.seq)
			l.mu.Unlock()
			body := fmt.Sprintf(`{"model":"gpt-4o-mini","user":%q,"max_tokens":50,"messages":[{"role":"user","content":"Say hello to %s, briefly."}]}`, user, tenant)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				l.one(c, url, tenant, user, body)
			}()
		default:
			l.mu.Lock()
			l.skipped++
			l.mu.Unlock()
		}
	}
	wg.Wait()
}

// one sends one request, retrying once a failure below HTTP (a kept-alive
// connection the server side closed, as HAProxy does when a node goes away).
func (l *load) one(c *http.Client, url, tenant, user, body string) {
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
			if len(l.transportSamples) < 5 {
				l.transportSamples = append(l.transportSamples, fmt.Sprintf("%s attempt %d at %s: %v", tenant, attempt+1, time.Now().Format("15:04:05.000"), err))
			}
			l.mu.Unlock()
			continue
		}
		l.statuses[resp.StatusCode]++
		l.answered[user] = answer{status: resp.StatusCode, node: resp.Header.Get("x-ringgate-node"), sent: sent, done: time.Now()}
		if l.perTenant[tenant] == nil {
			l.perTenant[tenant] = map[int]int{}
		}
		l.perTenant[tenant][resp.StatusCode]++
		if resp.StatusCode == http.StatusOK {
			l.byNode[resp.Header.Get("x-ringgate-node")]++
		}
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests && len(l.badSamples) < 10 {
			l.badSamples = append(l.badSamples, fmt.Sprintf("%s at %s: HTTP %d node %q: %s", tenant,
				time.Now().Format("15:04:05.000"), resp.StatusCode, resp.Header.Get("x-ringgate-node"), b))
		}
		l.mu.Unlock()
		return
	}
}

// postChat sends a chat completion for tenant and reads the whole answer.
func postChat(c *http.Client, url, tenant, body string) (*http.Response, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer sk-"+tenant)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// record is the part of the fake provider's GET /_records we use.
type record struct {
	Received time.Time `json:"received"`
	User     string    `json:"user"` // tenant#seq
}

func (r record) tenant() string {
	name, _, _ := strings.Cut(r.User, "#")
	return name
}

// rebalance is one "msg":"rebalance" log line.
type rebalance struct {
	Time         time.Time `json:"time"`
	RingVersion  uint64    `json:"ring_version"`
	Members      []string  `json:"members"`
	MovedTenants []string  `json:"moved_tenants"`
	HandedOver   int       `json:"handed_over"`
	TakenOver    int       `json:"taken_over"`
	// State says how the taken-over tenants' state arrived:
	// redis_snapshot, stale_redis_snapshot, fresh.
	State      map[string]int `json:"state"`
	HandoffMS  int64          `json:"handoff_ms"`
	FlushError string         `json:"flush_error"`
}

func (r rebalance) flushNote() string {
	if r.FlushError == "" {
		return ""
	}
	return "; flush error: " + r.FlushError
}

func parseRebalances(log string) []rebalance {
	var out []rebalance
	for _, line := range logLines(log, "rebalance") {
		var r rebalance
		if json.Unmarshal([]byte(line), &r) == nil {
			out = append(out, r)
		}
	}
	return out
}

type span struct{ from, to time.Time }

func (s span) widen(d time.Duration) span { return span{s.from.Add(-d), s.to.Add(d)} }

func latest(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}

// outside keeps the windows [t, t+w) (t the run's first arrival) that
// overlap none of the excluded spans.
func outside(w time.Duration, exclude []span) func(audit.Window) bool {
	return func(win audit.Window) bool {
		end := win.First.Add(w)
		for _, s := range exclude {
			if win.First.Before(s.to) && end.After(s.from) {
				return false
			}
		}
		return true
	}
}

// tightest is the shortest time spanned by k+1 consecutive timestamps whose
// span overlaps none of the excluded spans (-1 if none): below the window,
// k+1 fell into one window.
func tightest(ts []time.Time, k int, exclude []span) time.Duration {
	d, ok := audit.ShortestRun(ts, k+1, func(from, to time.Time) bool {
		for _, s := range exclude {
			if !from.After(s.to) && !to.Before(s.from) {
				return false
			}
		}
		return true
	})
	if !ok {
		return -1
	}
	return d
}
