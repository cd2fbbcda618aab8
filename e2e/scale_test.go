//go:build e2e

package e2e

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringgate/ringgate/internal/benchout"
	"github.com/ringgate/ringgate/internal/procstat"
	"github.com/ringgate/ringgate/internal/redistest"
)

// TestManyTenantsClusterReport starts three ringgate processes (Redis
// snapshots on), each configured with 100 000 tenants, drives 10 000 of them
// with a request each, then adds a fourth node and drains the second. It
// prints each node's time to ready and resident memory, and each ring
// change's handoff: how many tenants moved, and how long until every tenant
// a node gained could be decided there (the rebalance log's handoff_ms). It
// only reports; run it with
//
//	RINGGATE_BENCH_REPORT=1 go test -tags e2e -run ManyTenantsClusterReport -v ./e2e/
func TestManyTenantsClusterReport(t *testing.T) {
	if os.Getenv("RINGGATE_BENCH_REPORT") != "1" {
		t.Skip("set RINGGATE_BENCH_REPORT=1 to run the 100 000-tenant cluster report")
	}
	const configured, driven, workers = 100_000, 10_000, 8
	needTool(t, "redis-server", "/usr/bin/redis-server", "/usr/local/bin/redis-server")
	srv := redistest.Start(t)
	dir := t.TempDir()
	ps := newProcs(t, dir)

	var fakeAddr string
	if _, err := ps.launch("fake-upstream", binary, 10*time.Second, func() ([]string, func() bool, error) {
		port, err := freePort(false)
		fakeAddr = addr(port)
		return []string{"fake-upstream", "-listen", fakeAddr, "-max-records", "0"},
			answers("http://"+fakeAddr+"/_records", http.StatusOK), err
	}); err != nil {
		t.Fatal(err)
	}

	var tenants strings.Builder
	for i := range configured {
		fmt.Fprintf(&tenants, "\n[[tenants]]\nname = \"t%06d\"\nkeys = [\"sk-t%06d\"]\nrpm = 600\ntpm = 100000\nconcurrency = 10\n", i, i)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	secret := base64.StdEncoding.EncodeToString(key)
	nodes := make([]*gwNode, 4)
	ready := make([]time.Duration, 4)
	for i := range nodes {
		nodes[i] = &gwNode{name: fmt.Sprintf("node-%d", i+1)}
	}
	start := func(i int) {
		n := nodes[i]
		var join []string
		if i > 0 {
			join = []string{fmt.Sprintf("%q", nodes[0].gossip)}
		}
		var begin time.Time
		err := ps.launchNode(n, 60*time.Second, func() string {
			cfg := fmt.Sprintf(`[node]
name = %q
listen = %q
gossip = %q
join = [%s]
drain_timeout = "10s"

[cluster]
secret = %q

[redis]
addr = %q

[[upstreams]]
name = "fake"
kind = "openai"
base_url = "http://%s"
api_key = "sk-upstream"
models = ["gpt-4o-mini"]
`, n.name, n.listen, n.gossip, strings.Join(join, ", "), secret, srv.Addr(), fakeAddr) + tenants.String()
			begin = time.Now() // start to ready: from here, the config in hand
			return cfg
		})
		if err != nil {
			t.Fatal(err)
		}
		ready[i] = time.Since(begin)
	}
	for i := range 3 {
		start(i)
	}
	if err := waitCluster(nodes[:3], 3, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	rssReady, heapReady := make([]int64, 3), make([]int64, 3)
	for i := range rssReady {
		rssReady[i], heapReady[i] = rssOf(t, nodes[i].p.cmd.Process.Pid), heapOf(nodes[i])
	}

	// One request for each of 10 000 tenants, spread over the three nodes.
	var next, failed atomic.Int64
	var firstErr atomic.Pointer[string]
	lat := make([]time.Duration, driven)
	loadStart := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
			defer c.CloseIdleConnections()
			for {
				i := next.Add(1) - 1
				if i >= driven || time.Since(loadStart) > 3*time.Minute {
					return
				}
				n := nodes[(int(i)+w)%3]
				req, _ := http.NewRequest(http.MethodPost, "http://"+n.listen+"/v1/chat/completions",
					strings.NewReader(`{"model":"gpt-4o-mini","max_tokens":20,"messages":[{"role":"user","content":"hello there"}]}`))
				req.Header.Set("Authorization", fmt.Sprintf("Bearer sk-t%06d", i*(configured/driven)))
				req.Header.Set("Content-Type", "application/json")
				sent := time.Now()
				resp, err := c.Do(req)
				lat[i] = time.Since(sent)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					failed.Add(1)
					msg := fmt.Sprintf("tenant %d via %s: %v", i, n.name, err)
					firstErr.CompareAndSwap(nil, &msg)
				}
			}
		})
	}
	wg.Wait()
	loadTook := time.Since(loadStart)
	slices.Sort(lat)
	if f := failed.Load(); f > 0 {
		t.Fatalf("%d of %d requests failed; first: %s", f, driven, *firstErr.Load())
	}
	time.Sleep(2 * time.Second) // a snapshot round or two
	rssDriven, heapDriven := make([]int64, 3), make([]int64, 3)
	for i := range rssDriven {
		rssDriven[i], heapDriven[i] = rssOf(t, nodes[i].p.cmd.Process.Pid), heapOf(nodes[i])
	}

	// Scale-up: node-4 joins; then node-2 drains. With
	// RINGGATE_BENCH_PROFILE=dir, node-1's CPU profile of the scale-up
	// goes to dir/node-1-scale-up.prof (its pprof endpoint).
	var profiled sync.WaitGroup
	if dir := os.Getenv("RINGGATE_BENCH_PROFILE"); dir != "" {
		profiled.Go(func() {
			code, body, err := getLong("http://"+nodes[0].listen+"/debug/pprof/profile?seconds=8", 15*time.Second)
			if err != nil || code != http.StatusOK {
				t.Errorf("profile node-1: %d %v", code, err)
				return
			}
			_ = os.WriteFile(filepath.Join(dir, "node-1-scale-up.prof"), body, 0o644)
		})
		time.Sleep(100 * time.Millisecond)
	}
	start(3)
	if err := waitCluster([]*gwNode{nodes[0], nodes[1], nodes[2], nodes[3]}, 4, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	up := waitRebalances(t, []*gwNode{nodes[0], nodes[1], nodes[2], nodes[3]}, 4)
	drainStart := time.Now()
	_ = nodes[1].p.cmd.Process.Signal(os.Interrupt)
	code, ok := nodes[1].p.waitExit(30 * time.Second)
	drained := time.Since(drainStart)
	if !ok || code != 0 {
		t.Fatalf("node-2 drain: exit %d, in time %v", code, ok)
	}
	down := waitRebalances(t, []*gwNode{nodes[0], nodes[2], nodes[3]}, 3)
	profiled.Wait()

	var out strings.Builder
	fmt.Fprintf(&out, "\n%d configured tenants on every node, %d driven (one request each, %d clients, %s: p50 %s, p99 %s), Redis snapshots on\n\n",
		configured, driven, workers, loadTook.Round(time.Millisecond), lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*99/100].Round(time.Microsecond))
	fmt.Fprintf(&out, "GOMEMLIMIT=%q\n\n", os.Getenv("GOMEMLIMIT"))
	fmt.Fprintf(&out, "| node | start to ready | resident once ready | live heap | resident after the load | live heap |\n| --- | ---: | ---: | ---: | ---: | ---: |\n")
	for i := range 3 {
		fmt.Fprintf(&out, "| %s | %d ms | %d MiB | %d MiB | %d MiB | %d MiB |\n", nodes[i].name, ready[i].Milliseconds(),
			rssReady[i]>>20, heapReady[i]>>20, rssDriven[i]>>20, heapDriven[i]>>20)
	}
	fmt.Fprintf(&out, "| node-4 (scale-up) | %d ms | | | | |\n", ready[3].Milliseconds())
	fmt.Fprintf(&out, "\n| change | node | moved | handed over | taken over | state | handoff_ms |\n| --- | --- | ---: | ---: | ---: | --- | ---: |\n")
	for _, ch := range []struct {
		name string
		rs   map[string]rebalanceLine
	}{{"scale-up (node-4 joins)", up}, {fmt.Sprintf("drain of node-2 (exit 0 after %d ms)", drained.Milliseconds()), down}} {
		for _, n := range nodes {
			if r, ok := ch.rs[n.name]; ok {
				fmt.Fprintf(&out, "| %s | %s | %d | %d | %d | %v | %d |\n", ch.name, n.name, r.Moved, r.HandedOver, r.TakenOver, r.State, r.HandoffMs)
			}
		}
	}
	figs := benchout.Figures{"configured": configured, "driven": driven, "load_s": loadTook.Seconds(),
		"drain_exit_ms": float64(drained.Milliseconds()), "node4_ready_ms": float64(ready[3].Milliseconds())}
	for i := range 3 {
		for k, v := range map[string]int64{"ready_ms": ready[i].Milliseconds(), "rss_ready_mib": rssReady[i] >> 20,
			"heap_ready_mib": heapReady[i] >> 20, "rss_load_mib": rssDriven[i] >> 20, "heap_load_mib": heapDriven[i] >> 20} {
			minMax(figs, k, float64(v))
		}
	}
	for key, rs := range map[string]map[string]rebalanceLine{"up": up, "down": down} {
		for name, r := range rs {
			// What moved is what the nodes that stayed counted, and they
			// agree on it; the joiner counts every tenant (all of them
			// moved onto its first ring).
			if name != nodes[3].name || key != "up" {
				if old, ok := figs[key+"_moved"]; ok && old != float64(r.Moved) {
					t.Fatalf("%s: nodes disagree on what moved: %v and %d (%s)", key, old, r.Moved, name)
				}
				figs[key+"_moved"] = float64(r.Moved)
			}
			figs[key+"_taken"] += float64(r.TakenOver)
			figs[key+"_peer"] += float64(r.State["peer"])
			if r.TakenOver > 0 {
				minMax(figs, key+"_handoff_ms", float64(r.HandoffMs))
			}
		}
	}
	benchout.Save(t, "many-tenants-cluster", out.String(), figs)
}

// rebalanceLine is the part of a rebalance log line the report shows.
type rebalanceLine struct {
	Members    []string       `json:"members"`
	Moved      int            `json:"moved"`
	HandedOver int            `json:"handed_over"`
	TakenOver  int            `json:"taken_over"`
	State      map[string]int `json:"state"`
	HandoffMs  int64          `json:"handoff_ms"`
}

// minMax keeps the least and the greatest v seen under key_min and key_max.
func minMax(figs benchout.Figures, key string, v float64) {
	if old, ok := figs[key+"_min"]; !ok || v < old {
		figs[key+"_min"] = v
	}
	figs[key+"_max"] = max(figs[key+"_max"], v)
}

// waitRebalances waits for each node's last rebalance line to be of a ring
// with members nodes, and returns them by node.
func waitRebalances(t *testing.T, nodes []*gwNode, members int) map[string]rebalanceLine {
	t.Helper()
	out := map[string]rebalanceLine{}
	deadline := time.Now().Add(30 * time.Second)
	for len(out) < len(nodes) {
		for _, n := range nodes {
			lines := logLines(n.p.log(), "rebalance")
			if len(lines) == 0 {
				continue
			}
			var r rebalanceLine
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err == nil && len(r.Members) == members {
				out[n.name] = r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("rebalances to %d members: only %d of %d nodes logged one", members, len(out), len(nodes))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return out
}

// rssOf is a process's resident memory (VmRSS).
func rssOf(t *testing.T, pid int) int64 {
	t.Helper()
	rss, err := procstat.Resident(pid)
	if err != nil {
		t.Skip(err)
	}
	return rss
}

// getLong is get with a longer timeout (a profile takes its seconds).
func getLong(url string, timeout time.Duration) (int, []byte, error) {
	return getWith(&http.Client{Timeout: timeout}, url)
}

// heapOf is a node's live heap: its go_memstats_heap_alloc_bytes right
// after a collection (the heap profile's gc=1 runs one).
func heapOf(n *gwNode) int64 {
	if code, _, err := getLong("http://"+n.listen+"/debug/pprof/heap?gc=1", 10*time.Second); err != nil || code != http.StatusOK {
		return -1
	}
	_, body, err := get("http://" + n.listen + "/metrics")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_alloc_bytes "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f)
		}
	}
	return -1
}
