package node

import (
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/internal/redistest"
	"github.com/ringgate/ringgate/reserve"
)

// Requests wait in their tenant's queue on its owner (handed there from
// every node) when a new node takes the tenant over: each is decided once
// — by the old owner before it hands the tenant over, or by the new one —
// so the provider runs exactly one call per answer and never more at once
// than the tenant's concurrency, and no client gets a 5xx.
func TestClusterQueuedAcrossRingChange(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const slots = 2
	_, moved := hoPick(t, "qd", []string{"n1", "n2", "n3"}, []string{"n1", "n2", "n3", "n4"}, 1, 0)
	name := moved[0]
	tn := clTenant(name, 1<<20)
	tn.Concurrency = slots
	c := startClusterWith(t, 3, 4*time.Second, clOptions{Queue: &config.Queue{InteractiveWait: 5 * time.Second, BatchWait: 5 * time.Second, MaxDepth: 100}}, tn)
	tok, _ := reserve.NewTokenizer()
	c.fake.SetOptions(fakeupstream.Options{CountTokens: tok.Count, CompletionMin: 5, CompletionMax: 5, Latency: 150 * time.Millisecond})
	c.fake.Reset()
	vias := c.live()
	start := time.Now().Add(50 * time.Millisecond)
	var res []clResult
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 6 { // 6 clients, one call each 200 ms: twice what 2 slots serve
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := c.clLoad(name, vias, i, start.Add(time.Duration(i)*30*time.Millisecond), 200*time.Millisecond, 3*time.Second, 2)
			mu.Lock()
			res = append(res, r...)
			mu.Unlock()
		}()
	}
	time.Sleep(time.Second) // the load runs meanwhile: pacing
	c.addNode()
	wg.Wait()
	codes := answersOf(t, res)
	st := c.fake.Stats()
	recs := c.records(name)
	t.Logf("moved %s to %s with requests queued; answers %v; the provider ran %d calls, at most %d at once, limit %d",
		name, c.owner(name), codes, len(recs), st.MaxConcurrent, slots)
	if len(recs) != codes[200] {
		t.Errorf("the provider ran %d calls for %d admitted requests", len(recs), codes[200])
	}
	if st.MaxConcurrent > slots {
		t.Errorf("%d calls at once at the provider, limit %d", st.MaxConcurrent, slots)
	}
	if codes[200] < 20 {
		t.Errorf("only %d admitted on 2 slots of 150 ms", codes[200])
	}
}

// The provider's rpm leased by three nodes from a real Redis, under a load
// at 110 % of it spread over every node for four windows: without a
// queue, the excess is refused; with one, it waits on its node's line for
// the next block (sized for the line) and goes in as the window frees —
// the backlog stays well within the 2 s wait — so nearly nothing is
// refused, and the provider's limit still holds in every sliding window.
// Both runs in the same test, the first the baseline.
func TestClusterProviderLimitQueued(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const window, limit = 2 * time.Second, 150
	run := func(q *config.Queue) (codes map[int]int, breaches, worst int) {
		srv := redistest.Start(t)
		c, tenants := startProviderClusterWith(t, window, clOptions{Redis: srv.Addr(), Queue: q, RedisTimeout: auditRedisTimeout,
			Upstream: func(u *config.Upstream) { u.RPM = limit }},
			// The provider counts over the window less a bucket
			// (window/128: the leased window's grain) and clJitter: the
			// requests a line holds go the instant a bucket leaves the
			// window, so a bucket's worth arrives up to a bucket early
			// against an exact window, and a loaded machine delays some
			// calls on the way more than others. (With clJitter alone, 1
			// of 665 was over in one CI run.)
			fakeupstream.ProviderLimits{Requests: limit, Window: window - window/128 - clJitter}, 5*time.Millisecond)
		perTenant := window * time.Duration(len(tenants)) * 10 / time.Duration(11*limit)
		start := time.Now().Add(50 * time.Millisecond)
		res := c.loadAll(tenants, start, perTenant, 4*window)
		codes = answersOf(t, res)
		var got []time.Time
		for _, r := range c.fake.Records() {
			if !r.RateLimited {
				got = append(got, r.Received)
			}
		}
		worst, _ = clMaxSliding(got, window-window/128-clJitter) // as the provider counts (above)
		return codes, int(c.fake.Stats().Breaches), worst
	}
	bCodes, bBreaches, bWorst := run(nil)
	codes, breaches, worst := run(&config.Queue{InteractiveWait: 2 * time.Second, BatchWait: 2 * time.Second, MaxDepth: 1000})
	refused := func(c map[int]int) float64 { return float64(c[429]) / float64(max(1, c[200]+c[429])) }
	t.Logf("without a queue: answers %v (%.1f %% refused), fullest window %d of %d, breaches %d", bCodes, 100*refused(bCodes), bWorst, limit, bBreaches)
	t.Logf("with a queue: answers %v (%.1f %% refused), fullest window %d of %d, breaches %d", codes, 100*refused(codes), worst, limit, breaches)
	if breaches != 0 || worst > limit {
		t.Errorf("the provider's limit was breached %d times, fullest window %d of %d", breaches, worst, limit)
	}
	if refused(codes) > 0.02 {
		t.Errorf("%.1f %% refused at 110 %% of the provider's limit with a queue", 100*refused(codes))
	}
}

// With the owner's HTTP unreachable, an edge enforces the tenant's strict
// share itself; with queues, a request the share has no slot for waits on
// the edge for one (a call's end on the share frees it) instead of a 429,
// and never more than the share runs at once. The same load without
// queues, first, is the baseline. Halfway, the edge reloads its config:
// the episode goes on, its share kept (before, the reload started a second
// episode, seeded full on top of the first: its waiters were refused).
func TestClusterFallbackQueued(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const slots, share = 6, 2 // 3 members
	run := func(q *config.Queue) (codes map[int]int, atOnce int, byEdge bool, starts int) {
		tn := clTenant("acme", 1<<20)
		tn.Concurrency = slots
		// A 1 s window: without Redis the share starts as if the whole
		// window had been used (nothing says otherwise), so it admits
		// nothing for a window.
		c := startClusterWith(t, 3, time.Second, clOptions{Queue: q}, tn)
		tok, _ := reserve.NewTokenizer()
		c.fake.SetOptions(fakeupstream.Options{CountTokens: tok.Count, CompletionMin: 5, CompletionMax: 5, Latency: 100 * time.Millisecond})
		c.fake.Reset()
		o := c.byName(c.owner("acme"))
		e := c.edge(o.Name())
		if err := o.ln.Close(); err != nil { // the owner alive in gossip, its HTTP gone
			t.Fatalf("close %s's listener: %v", o.Name(), err)
		}
		// 3 s at 22/s: the share's 2 slots of 100 ms serve 20/s, once
		// its first window is over; the line that built up by then
		// waits about a second.
		reloaded := make(chan error, 1)
		go func() {
			time.Sleep(1500 * time.Millisecond) // pacing: halfway through the load
			cfg := *e.cfg
			reloaded <- e.Reload(&cfg)
		}()
		res := c.clLoad("acme", []*clNode{e}, 0, time.Now(), 45*time.Millisecond, 3*time.Second, 64)
		if err := <-reloaded; err != nil {
			t.Fatalf("reload %s: %v", e.Name(), err)
		}
		starts = len(e.log.find(map[string]any{"msg": "fallback", "phase": "start", "tenant": "acme"}))
		codes = answersOf(t, res)
		byEdge = true
		for _, r := range res {
			byEdge = byEdge && r.rep.node == e.Name()
		}
		return codes, c.fake.Stats().MaxConcurrent, byEdge, starts
	}
	refused := func(c map[int]int) float64 { return float64(c[429]) / float64(max(1, c[200]+c[429])) }
	bCodes, bAtOnce, _, _ := run(nil)
	codes, atOnce, byEdge, starts := run(&config.Queue{InteractiveWait: 2 * time.Second, BatchWait: 2 * time.Second, MaxDepth: 1000})
	if starts != 1 {
		t.Errorf("the edge logged %d fallback starts, want 1: the reload started the episode again", starts)
	}
	t.Logf("without queues: answers %v (%.1f %% refused), at most %d at once", bCodes, 100*refused(bCodes), bAtOnce)
	t.Logf("with queues: answers %v (%.1f %% refused), at most %d at once, share %d; %d fallback start(s) logged by the edge", codes, 100*refused(codes), atOnce, share, starts)
	if atOnce > share || bAtOnce > share {
		t.Errorf("%d (%d without queues) calls at once at the provider, the edge's share %d", atOnce, bAtOnce, share)
	}
	if !byEdge {
		t.Error("some answers did not come from the edge")
	}
	if refused(codes) > 0.05 {
		t.Errorf("%.1f %% refused on the share with queues", 100*refused(codes))
	}
}
