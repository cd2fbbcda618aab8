package node

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/internal/redistest"
	"github.com/ringgate/ringgate/reserve"
)

// A hot tenant, sending ten times what the others do and more than its
// own limit, spills: every node serves it itself on blocks of its limits
// leased from Redis (x-ringgate-node names the node the client chose, not
// the owner), while the calm tenants keep going to their owners. Counted
// at the provider, the hot tenant stays within its limit in every sliding
// window — across the switch on, the switch back once it cools, and a
// second burst right after, when an owner that had lost what the spill
// admitted would let a whole window more through.
func TestClusterHotTenantSpills(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const (
		window   = 4 * time.Second
		hotLimit = 400 // requests per window: 100/s
		hotEvery = 6 * time.Millisecond
		calmRPM  = 120 // per window: 30/s, twice what they send
		calmEach = 66 * time.Millisecond
	)
	srv := redistest.Start(t)
	tenants := []config.Tenant{clTenant("hot", hotLimit)}
	for i := range 3 {
		tenants = append(tenants, clTenant(fmt.Sprintf("calm-%d", i), calmRPM))
	}
	c := startClusterWith(t, 3, window, clOptions{Redis: srv.Addr(), SpilloverRPS: 60}, tenants...)
	owner := c.byName(c.owner("hot"))
	t.Logf("hot is owned by %s", owner.Name())

	mode := func(nd *clNode) string {
		var v struct {
			Spillover struct {
				Mode  string `json:"mode"`
				Owner string `json:"owner"`
			} `json:"spillover"`
		}
		resp, err := c.hc.Get("http://" + nd.Addr() + "/tenants/hot")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		return v.Spillover.Mode
	}

	// The calm tenants run throughout.
	start := time.Now().Add(50 * time.Millisecond)
	const total = 6 * time.Second
	var mu sync.Mutex
	var calm []clResult
	var wg sync.WaitGroup
	for i, tn := range tenants[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := c.clLoad(tn.Name, c.live(), i, start.Add(time.Duration(i)*calmEach/3), calmEach, total, 16)
			mu.Lock()
			calm = append(calm, r...)
			mu.Unlock()
		}()
	}

	// Burst one: 3 s at 167/s, over every node.
	hot := c.clLoad("hot", c.live(), 0, start, hotEvery, 3*time.Second, 64)
	spilled := spillLogged(owner, "on", "hot", time.Second)
	var modes []string
	for _, nd := range c.live() {
		modes = append(modes, nd.Name()+":"+mode(nd))
	}
	t.Logf("after burst one: spilled %v, modes %v", spilled, modes)
	if !spilled {
		t.Fatal("the hot tenant never spilled")
	}
	// Quiet: the cluster-wide rate falls to 0, the owner takes it back.
	// Burst one is over, so the owner's last switch is what counts: an
	// off in the middle of it (Redis slow for a moment) may have been
	// followed by another on, or may be the last one.
	quietFrom := time.Now()
	if !pollUntil(3*time.Second, func() bool {
		var last string
		for _, e := range owner.log.find(map[string]any{"msg": "spillover", "tenant": "hot"}) {
			if p := fmt.Sprint(e["phase"]); p == "on" || p == "off" {
				last = p
			}
		}
		return last == "off"
	}) {
		t.Fatal("the hot tenant never went back to its owner")
	}
	t.Logf("back with its owner %v after the burst", time.Since(quietFrom).Round(time.Millisecond))
	if m := mode(owner); m != "owner" {
		t.Errorf("after the switch back the owner shows mode %q", m)
	}
	// Burst two, right away and faster: the window still holds burst
	// one's admissions, so it gets little until they leave it; an owner
	// that lost what the spill admitted would let them through at once.
	hot = append(hot, c.clLoad("hot", c.live(), 1, time.Now(), 2*time.Millisecond, 1500*time.Millisecond, 64)...)
	wg.Wait()

	codes := answersOf(t, hot)
	servedBy := map[string]int{}
	for _, r := range hot {
		if r.err == nil && r.rep.status == 200 && r.rep.node == r.via {
			servedBy[r.via]++
		}
	}
	t.Logf("hot: %d sent, answers %v; 200s served by the node the client chose: %v", len(hot), codes, servedBy)
	for _, nd := range c.live() {
		if nd != owner && servedBy[nd.Name()] == 0 {
			t.Errorf("%s never served the hot tenant itself", nd.Name())
		}
	}
	got, worst, at := spillAudit(t, c, "hot", window, hotLimit)
	t.Logf("hot at the provider: %d in all, fullest window %d (ending %v after the start), limit %d",
		len(got), worst, at.Sub(start).Round(time.Millisecond), hotLimit)
	// Burst one, mostly spilled, used most of the limit.
	if n := clCountIn(got, start, start.Add(3*time.Second)); n < hotLimit*80/100 {
		t.Errorf("only %d of %d used in burst one", n, hotLimit)
	}

	calmCodes := answersOf(t, calm)
	t.Logf("calm: %d sent, answers %v", len(calm), calmCodes)
	if calmCodes[200] != len(calm) {
		t.Errorf("the calm tenants, within their limits, got %v", calmCodes)
	}
	for _, tn := range tenants[1:] {
		if w, _ := clMaxSliding(clReceived(c.records(tn.Name)), window-clJitter); w > calmRPM {
			t.Errorf("%s: %d in a window, limit %d", tn.Name, w, calmRPM)
		}
	}
}

// The owner of a spilled tenant crashes in the middle of a burst: the
// other nodes go on serving on the leased budget until the spill lapses
// (2 s without the owner's word), then on their fallback share until
// their ring drops the owner, then the new owner takes the tenant from its
// last snapshot and what the edges' ledgers report (and spills it again).
// At the provider the tenant stays within its limit in every window, and
// no client gets a 5xx. Regression: a fallback share seeded from the dead
// owner's snapshot alone, without what the edge had admitted on the spill
// since, let 403-413 through in a window of 400.
func TestClusterSpilledOwnerCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const (
		window   = 4 * time.Second
		hotLimit = 400
	)
	// hung: Redis stops answering as the owner dies (SIGSTOP, 1.5 s), so
	// the edges' budgets stall and no snapshot can be read. Regression: the
	// edges' fallback shares, seeded from the owner's answers from before
	// the spill, knew nothing of what the cluster had admitted on it, and
	// an edge went back to the spill once Redis answered, its budget not
	// knowing what the share had admitted: 457-544 in a window of 400.
	//
	// owner-busiest: the load goes to the owner alone until it dies, then
	// to the others, which have seen answers only from before the spill.
	// Regression: their shares, seeded from those answers, added 2 × 133
	// to the 400 the owner had admitted on the spill.
	for _, tc := range []struct {
		name         string
		redisHung    time.Duration
		ownerBusiest bool
	}{
		{"redis-up", 0, false},
		{"redis-hung", 1500 * time.Millisecond, false},
		{"redis-hung/owner-busiest", 1500 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			c := startClusterWith(t, 3, window, clOptions{Redis: srv.Addr(), SpilloverRPS: 60, SnapshotInterval: 200 * time.Millisecond},
				clTenant("hot", hotLimit))
			owner := c.byName(c.owner("hot"))
			var edges []*clNode
			for _, nd := range c.live() {
				if nd != owner {
					edges = append(edges, nd)
				}
			}
			start := time.Now().Add(50 * time.Millisecond)
			done := make(chan []clResult)
			var before []clResult
			if tc.ownerBusiest {
				c.warm([]string{"hot"})
				before = c.clLoad("hot", []*clNode{owner}, 0, start, 4*time.Millisecond, 1500*time.Millisecond, 64)
				if !spillLogged(owner, "on", "hot", time.Second) {
					t.Fatal("the hot tenant never spilled")
				}
			} else {
				go func() { done <- c.clLoad("hot", edges, 0, start, 4*time.Millisecond, 6*time.Second, 64) }()
				if !spillLogged(owner, "on", "hot", 3*time.Second) {
					t.Fatal("the hot tenant never spilled")
				}
				time.Sleep(500 * time.Millisecond) // the load runs meanwhile: pacing
			}
			crashAt := time.Now()
			if tc.redisHung > 0 {
				srv.Pause(tc.redisHung)
			}
			_ = owner.Close()
			owner.gone = true
			if tc.ownerBusiest {
				go func() { done <- c.clLoad("hot", edges, 0, time.Now(), 4*time.Millisecond, 4*time.Second, 64) }()
			}
			codes := answersOf(t, append(before, <-done...))
			got, worst, at := spillAudit(t, c, "hot", window, hotLimit)
			// Bounded logs: the edges' ledgers fail a report to the dead
			// owner every few milliseconds, a line a second says so.
			// (Regression: a line each, about 140 a node.)
			lost := 0
			for _, nd := range edges {
				if n := len(nd.log.find(map[string]any{"msg": "handoff", "phase": "delta_lost"})); n > 8 {
					t.Errorf("%s wrote %d delta_lost lines in %v, want one a second at most", nd.Name(), n, time.Since(crashAt).Round(time.Second))
				} else {
					lost += n
				}
			}
			t.Logf("owner %s crashed %v after the start; answers %v; at the provider %d, fullest window %d (ending %v after the start), limit %d; delta_lost lines %d",
				owner.Name(), crashAt.Sub(start).Round(time.Millisecond), codes, len(got), worst, at.Sub(start).Round(time.Millisecond), hotLimit, lost)
		})
	}
}

// Redis stops answering while a tenant is spilled — stopped, or hung
// (SIGSTOP) — and comes back: the owner takes the tenant back with what
// every node admitted on the spill (their ledgers need no Redis), no
// client gets a 5xx, and the tenant stays within its limit in every
// window.
func TestClusterSpillRedisDown(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const (
		window   = 4 * time.Second
		hotLimit = 400
	)
	for _, how := range []string{"stopped", "hung"} {
		t.Run(how, func(t *testing.T) {
			srv := redistest.Start(t)
			c := startClusterWith(t, 3, window, clOptions{Redis: srv.Addr(), SpilloverRPS: 60}, clTenant("hot", hotLimit))
			owner := c.byName(c.owner("hot"))
			start := time.Now().Add(50 * time.Millisecond)
			done := make(chan []clResult)
			go func() { done <- c.clLoad("hot", c.live(), 0, start, 4*time.Millisecond, 5*time.Second, 64) }()
			if !spillLogged(owner, "on", "hot", 3*time.Second) {
				t.Fatal("the hot tenant never spilled")
			}
			time.Sleep(300 * time.Millisecond) // the load runs meanwhile: pacing
			downAt := time.Now()
			if how == "stopped" {
				srv.Stop()
			} else {
				srv.Pause(2 * time.Second)
			}
			backAt := time.Time{}
			deadline := time.Now().Add(2 * time.Second)
			for backAt.IsZero() && time.Now().Before(deadline) {
				if len(owner.log.find(map[string]any{"msg": "spillover", "phase": "off", "reason": "store_unreachable"})) > 0 {
					backAt = time.Now()
				}
				time.Sleep(clPollEvery)
			}
			if backAt.IsZero() {
				t.Error("the owner did not take the tenant back with Redis down")
			}
			if how == "stopped" {
				time.Sleep(time.Until(downAt.Add(2 * time.Second))) // pacing: Redis down for 2 s
				srv.Restart()
			}
			res := <-done
			codes := answersOf(t, res)
			got, worst, at := spillAudit(t, c, "hot", window, hotLimit)
			t.Logf("Redis %s %v after the start, the owner had the tenant back %v later; answers %v; at the provider %d, fullest window %d (ending %v after the start), limit %d",
				how, downAt.Sub(start).Round(time.Millisecond), backAt.Sub(downAt).Round(time.Millisecond), codes, len(got), worst,
				at.Sub(start).Round(time.Millisecond), hotLimit)
		})
	}
}

// The ring changes under a spilled tenant: a new node takes it over (a
// join), or its owner drains. The owner ends the spill before its state
// leaves — fenced in Redis, the members stopped and their reports in —
// and the new owner continues from that state. At the provider the tenant
// stays within its limit in every window, and no client gets a 5xx.
func TestClusterSpilledTenantMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const (
		window   = 4 * time.Second
		hotLimit = 400
	)
	for _, change := range []string{"join", "drain"} {
		t.Run(change, func(t *testing.T) {
			name := "hot"
			if change == "join" {
				_, moved := hoPick(t, "hot", []string{"n1", "n2", "n3"}, []string{"n1", "n2", "n3", "n4"}, 1, 0)
				name = moved[0]
			}
			srv := redistest.Start(t)
			c := startClusterWith(t, 3, window, clOptions{Redis: srv.Addr(), SpilloverRPS: 60}, clTenant(name, hotLimit))
			owner := c.byName(c.owner(name))
			vias := c.live()
			if change == "drain" {
				vias = nil
				for _, nd := range c.live() {
					if nd != owner {
						vias = append(vias, nd)
					}
				}
			}
			start := time.Now().Add(50 * time.Millisecond)
			done := make(chan []clResult)
			go func() { done <- c.clLoad(name, vias, 0, start, 4*time.Millisecond, 5*time.Second, 64) }()
			if !spillLogged(owner, "on", name, 3*time.Second) {
				t.Fatal("the tenant never spilled")
			}
			time.Sleep(500 * time.Millisecond) // the load runs meanwhile: pacing
			changeAt := time.Now()
			drained := make(chan bool, 1)
			if change == "join" {
				c.addNode()
			} else {
				go func() { drained <- owner.Drain() }()
				owner.gone = true
			}
			res := <-done
			if change == "drain" {
				select {
				case <-drained:
				case <-time.After(10 * time.Second):
					t.Error("the drain did not end")
				}
			}
			codes := answersOf(t, res)
			got, worst, at := spillAudit(t, c, name, window, hotLimit)
			offs := owner.log.find(map[string]any{"msg": "spillover", "phase": "off", "tenant": name})
			t.Logf("%s %v after the start, now owned by %s; the spill ended %v; answers %v; at the provider %d, fullest window %d (ending %v after the start), limit %d",
				change, changeAt.Sub(start).Round(time.Millisecond), c.owner(name), offs, codes, len(got), worst,
				at.Sub(start).Round(time.Millisecond), hotLimit)
			if len(offs) == 0 {
				t.Error("the old owner never ended the spill")
			}
		})
	}
}

// A hot tenant limited in concurrency, its calls long enough to pile up:
// the calls in flight when it spills are carried into the budget, and
// the spill's calls in flight are counted by the owner when it takes the
// tenant back. At the provider there are never more at once than the
// limit, before, during and after the spill.
func TestClusterSpillConcurrency(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const limit = 8
	srv := redistest.Start(t)
	tn := clTenant("hot", 1<<20)
	tn.Concurrency = limit
	c := startClusterWith(t, 3, 4*time.Second, clOptions{Redis: srv.Addr(), SpilloverRPS: 60}, tn)
	tok, _ := reserve.NewTokenizer()
	c.fake.SetOptions(fakeupstream.Options{CountTokens: tok.Count, CompletionMin: 20, CompletionMax: 40, Latency: 60 * time.Millisecond})
	c.fake.Reset()
	owner := c.byName(c.owner("hot"))
	start := time.Now().Add(50 * time.Millisecond)
	// 2.5 s at 250/s (15 calls' worth at once), quiet, then again.
	res := c.clLoad("hot", c.live(), 0, start, 4*time.Millisecond, 2500*time.Millisecond, 64)
	spilled := len(owner.log.find(map[string]any{"msg": "spillover", "phase": "on", "tenant": "hot"})) > 0
	deadline := time.Now().Add(3 * time.Second)
	for len(owner.log.find(map[string]any{"msg": "spillover", "phase": "off", "tenant": "hot"})) == 0 && time.Now().Before(deadline) {
		time.Sleep(clPollEvery)
	}
	res = append(res, c.clLoad("hot", c.live(), 1, time.Now(), 4*time.Millisecond, time.Second, 64)...)
	codes := answersOf(t, res)
	st := c.fake.Stats()
	t.Logf("spilled %v; answers %v; the provider ran %d calls, at most %d at once, limit %d", spilled, codes, st.Admitted, st.MaxConcurrent, limit)
	if !spilled {
		t.Error("the tenant never spilled")
	}
	if st.MaxConcurrent > limit {
		t.Errorf("%d calls at once at the provider, limit %d", st.MaxConcurrent, limit)
	}
	// 8 slots of 60 ms calls for 3.5 s: about 470 calls at best.
	if st.Admitted < 200 {
		t.Errorf("only %d calls in 3.5 s on 8 slots of 60 ms", st.Admitted)
	}
}

// spillLogged polls nd's log, at most timeout, for a spillover line of
// phase for tenant.
func spillLogged(nd *clNode, phase, tenant string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if len(nd.log.find(map[string]any{"msg": "spillover", "phase": phase, "tenant": tenant})) > 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(clPollEvery)
	}
}

// spillAudit counts what reached the provider for tenant in every sliding
// window (shortened by the loopback jitter) and fails the test past limit.
func spillAudit(t *testing.T, c *clCluster, tenant string, window time.Duration, limit int) (got []time.Time, worst int, at time.Time) {
	t.Helper()
	got = clReceived(c.records(tenant))
	worst, at = clMaxSliding(got, window-clJitter)
	if worst > limit {
		t.Errorf("%d %s requests reached the provider within %v, limit %d", worst, tenant, window-clJitter, limit)
	}
	return got, worst, at
}

// A spilled tenant at its concurrency, with queues configured and without:
// the limit holds at the provider either way. A spill's refusal answers at
// once: it has no line of its own to wait in. The refusals and the
// requests that waited away from the owner are logged.
func TestClusterSpillQueued(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const limit = 8
	run := func(q *config.Queue) (codes map[int]int, atOnce int, waitedElsewhere int, spilled bool) {
		srv := redistest.Start(t)
		tn := clTenant("hot", 1<<20)
		tn.Concurrency = limit
		c := startClusterWith(t, 3, 4*time.Second, clOptions{Redis: srv.Addr(), SpilloverRPS: 60, Queue: q}, tn)
		tok, _ := reserve.NewTokenizer()
		c.fake.SetOptions(fakeupstream.Options{CountTokens: tok.Count, CompletionMin: 20, CompletionMax: 40, Latency: 60 * time.Millisecond})
		c.fake.Reset()
		owner := c.byName(c.owner("hot"))
		// 2.5 s at 160/s: 8 slots of 60 ms serve about 130/s.
		res := c.clLoad("hot", c.live(), 0, time.Now().Add(50*time.Millisecond), 6*time.Millisecond, 2500*time.Millisecond, 64)
		codes = answersOf(t, res)
		for _, r := range res {
			if r.rep.status == 200 && r.rep.node != owner.Name() && r.rep.header.Get("x-ringgate-queued-ms") != "" {
				waitedElsewhere++
			}
		}
		spilled = len(owner.log.find(map[string]any{"msg": "spillover", "phase": "on", "tenant": "hot"})) > 0
		return codes, c.fake.Stats().MaxConcurrent, waitedElsewhere, spilled
	}
	refused := func(c map[int]int) float64 { return float64(c[429]) / float64(max(1, c[200]+c[429])) }
	bCodes, bAtOnce, _, bSpilled := run(nil)
	codes, atOnce, elsewhere, spilled := run(&config.Queue{InteractiveWait: 2 * time.Second, BatchWait: 2 * time.Second, MaxDepth: 1000})
	t.Logf("without queues: spilled %v, answers %v (%.1f %% refused), at most %d at once", bSpilled, bCodes, 100*refused(bCodes), bAtOnce)
	t.Logf("with queues: spilled %v, answers %v (%.1f %% refused), at most %d at once; %d admitted after waiting on a node other than the owner",
		spilled, codes, 100*refused(codes), atOnce, elsewhere)
	if !spilled || !bSpilled {
		t.Fatal("the tenant never spilled")
	}
	if atOnce > limit || bAtOnce > limit {
		t.Errorf("%d (%d without queues) calls at once at the provider, limit %d", atOnce, bAtOnce, limit)
	}
}
