package lease

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/ringgate/ringgate/limiter"
)

// simNode is one node of a simulated cluster: its Leaser and budget.
type simNode struct {
	l *Leaser
	b *Budget
}

var simTick int64 = 10

type admission struct {
	at, tokens int64
}

// sim runs nodes leasing one budget from st on a simulated clock, with
// requests arriving at rate (per window) spread over the nodes by share,
// and returns what was admitted.
type sim struct {
	t       *testing.T
	now     int64
	window  time.Duration
	nodes   []simNode
	got     []admission
	refused int
	during  func(now int64) // called every step
}

func newSim(t *testing.T, st Store, n int, cfg Config) *sim {
	s := &sim{t: t, now: int64(1000 * time.Hour), window: cfg.Window}
	for i := range n {
		l := NewLeaser(LeaserConfig{Store: st, Node: fmt.Sprintf("n%d", i), Clock: func() int64 { return s.now }})
		s.nodes = append(s.nodes, simNode{l: l, b: l.Budget(cfg, func() int { return n })})
	}
	return s
}

// run advances the clock by dur in 1 ms steps; perWindow requests arrive
// per window, node i getting shares[i] of them; a store round runs every
// 10 ms on each node.
func (s *sim) run(dur time.Duration, perWindow int, shares []float64, rng *rand.Rand, tokens func() int64) {
	step := int64(time.Millisecond)
	perStep := float64(perWindow) * float64(step) / float64(s.window)
	end := s.now + int64(dur)
	carry := 0.0
	for ; s.now < end; s.now += step {
		for i, n := range s.nodes {
			// Each node on its own tick, as real nodes are.
			if (s.now/step+int64(3*i))%simTick == 0 {
				n.l.Maintain(context.Background())
			}
		}
		if s.during != nil {
			s.during(s.now)
		}
		carry += perStep
		for ; carry >= 1; carry-- {
			x, i := rng.Float64(), 0
			for i < len(shares)-1 && x > shares[i] {
				x -= shares[i]
				i++
			}
			tk := tokens()
			ticket, d := s.nodes[i].b.Take(s.now, tk)
			if d.Allowed {
				s.got = append(s.got, admission{s.now, tk})
				s.nodes[i].b.Finish(s.now, &ticket, tk)
			} else {
				s.refused++
			}
		}
	}
}

// audit checks every sliding window ending at an admission and reports the
// fullest, and the emptiest window after the first (what was used).
func (s *sim) audit(from int64) (maxReq, maxTok, minReq, minTok int64) {
	w := int64(s.window)
	sort.Slice(s.got, func(i, j int) bool { return s.got[i].at < s.got[j].at })
	j := 0
	var req, tok int64
	for _, a := range s.got {
		req++
		tok += a.tokens
		for s.got[j].at <= a.at-w {
			req--
			tok -= s.got[j].tokens
			j++
		}
		maxReq, maxTok = max(maxReq, req), max(maxTok, tok)
	}
	minReq, minTok = -1, -1
	for t := from; t+w <= s.now; t += w / 8 {
		var n, tok int64
		for _, a := range s.got {
			if a.at > t && a.at <= t+w {
				n++
				tok += a.tokens
			}
		}
		if minReq < 0 || n < minReq {
			minReq = n
		}
		if minTok < 0 || tok < minTok {
			minTok = tok
		}
	}
	return maxReq, maxTok, minReq, minTok
}

func TestBudgetsHoldTheLimitAndUseIt(t *testing.T) {
	const window = 3 * time.Second
	cases := []struct {
		name   string
		limits limiter.Limits
		shares []float64
		demand int // requests per window
	}{
		{"requests, even", limiter.Limits{Requests: 300}, []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}, 600},
		{"requests, skewed", limiter.Limits{Requests: 300}, []float64{0.7, 0.2, 0.1}, 600},
		{"requests, one node busy", limiter.Limits{Requests: 300}, []float64{0.98, 0.01, 0.01}, 600},
		{"tokens", limiter.Limits{Tokens: 30000}, []float64{0.5, 0.3, 0.2}, 600},
		{"both", limiter.Limits{Requests: 300, Tokens: 40000}, []float64{0.5, 0.3, 0.2}, 600},
	}
	for stName, st := range stores(t) {
		for _, c := range cases {
			t.Run(stName+"/"+c.name, func(t *testing.T) {
				s := newSim(t, st, 3, Config{Key: t.Name(), Limits: c.limits, Window: window})
				rng := rand.New(rand.NewPCG(1, 2))
				s.run(5*window, c.demand, c.shares, rng, func() int64 { return 50 + rng.Int64N(100) })
				maxReq, maxTok, minReq, minTok := s.audit(s.now - int64(4*window))
				t.Logf("admitted %d, refused %d; fullest window %d requests %d tokens; emptiest after the first %d requests %d tokens",
					len(s.got), s.refused, maxReq, maxTok, minReq, minTok)
				if c.limits.Requests > 0 {
					if maxReq > c.limits.Requests {
						t.Errorf("a window held %d requests, limit %d", maxReq, c.limits.Requests)
					}
					if float64(minReq) < 0.9*float64(c.limits.Requests) {
						t.Errorf("a window used %d of %d requests, want >= 90%%", minReq, c.limits.Requests)
					}
				}
				if c.limits.Tokens > 0 && maxTok > c.limits.Tokens {
					t.Errorf("a window held %d tokens, limit %d", maxTok, c.limits.Tokens)
				}
				if c.limits.Requests == 0 && float64(minTok) < 0.9*float64(c.limits.Tokens) {
					t.Errorf("a window used %d of %d tokens, want >= 90%%", minTok, c.limits.Tokens)
				}
			})
		}
	}
}

// The store goes down mid-run and comes back: no window ever holds more
// than the limit, the share admits once the others' blocks are out of
// the window, and leasing resumes.
func TestBudgetsStoreDown(t *testing.T) {
	const window = 3 * time.Second
	st := NewInmemStore()
	lim := limiter.Limits{Requests: 300}
	s := newSim(t, st, 3, Config{Key: "down", Limits: lim, Window: window})
	rng := rand.New(rand.NewPCG(3, 4))
	tokens := func() int64 { return 100 }
	shares := []float64{0.5, 0.3, 0.2}
	s.run(2*window, 600, shares, rng, tokens)
	before := len(s.got)
	st.Down(true)
	downAt := s.now
	s.run(3*window, 600, shares, rng, tokens)
	during := len(s.got) - before
	degraded := s.nodes[0].b.Stats(s.now).Degraded
	st.Down(false)
	callsBack := st.Calls
	s.run(3*window, 600, shares, rng, tokens)
	after := len(s.got) - before - during
	maxReq, _, _, _ := s.audit(s.now)
	t.Logf("admitted %d before, %d in the %v down (degraded %v), %d after; fullest window %d of %d; %d store calls after",
		before, during, 3*window, degraded, after, maxReq, lim.Requests, st.Calls-callsBack)
	if maxReq > lim.Requests {
		t.Errorf("a window held %d requests, limit %d", maxReq, lim.Requests)
	}
	if !degraded {
		t.Error("not degraded while the store was down")
	}
	// The share opens a window after the outage began: in the last of
	// the three windows down, each node admits its share.
	var late int
	for _, a := range s.got {
		if a.at > downAt+int64(2*window)+int64(window/8) && a.at <= downAt+int64(3*window) {
			late++
		}
	}
	if late < int(lim.Requests)*8/10 {
		t.Errorf("the share admitted %d in the last window down, want most of %d", late, lim.Requests)
	}
	if after < 2*int(lim.Requests) || st.Calls == callsBack {
		t.Errorf("leasing did not resume: %d admitted after, %d calls", after, st.Calls-callsBack)
	}
	if s.nodes[0].b.Stats(s.now).Degraded {
		t.Error("still degraded after the store came back")
	}
}

// Slots: calls in flight on all nodes together never exceed the limit,
// and at twice the demand most of the limit is in use.
func TestBudgetsSlots(t *testing.T) {
	const window = 3 * time.Second
	for stName, st := range stores(t) {
		t.Run(stName, func(t *testing.T) {
			const limit = 12
			s := newSim(t, st, 3, Config{Key: t.Name(), Limits: limiter.Limits{Concurrency: limit}, Window: window})
			rng := rand.New(rand.NewPCG(5, 6))
			type running struct {
				node int
				tk   Ticket
				end  int64
			}
			var live []running
			var peak, sum, samples int64
			step := int64(time.Millisecond)
			for end := s.now + int64(2*window); s.now < end; s.now += step {
				for i, n := range s.nodes {
					if (s.now/step+int64(3*i))%10 == 0 {
						n.l.Maintain(context.Background())
					}
				}
				keep := live[:0]
				for _, r := range live {
					if r.end <= s.now {
						s.nodes[r.node].b.Finish(s.now, &r.tk, 0)
					} else {
						keep = append(keep, r)
					}
				}
				live = keep
				// Each call lasts 50 ms: 12 slots serve 240 a second;
				// ask for twice that.
				for range 2 {
					if rng.IntN(4) != 0 {
						continue
					}
					i := rng.IntN(3)
					if tk, d := s.nodes[i].b.Take(s.now, 0); d.Allowed {
						live = append(live, running{i, tk, s.now + int64(50*time.Millisecond)})
					}
				}
				n := int64(len(live))
				peak = max(peak, n)
				if s.now > end-int64(window) {
					sum += n
					samples++
				}
			}
			avg := float64(sum) / float64(samples)
			t.Logf("peak %d in flight of %d; %.1f on average in the last window", peak, limit, avg)
			if peak > limit {
				t.Errorf("%d calls in flight, limit %d", peak, limit)
			}
			if avg < 0.8*limit {
				t.Errorf("%.1f of %d slots used on average", avg, limit)
			}
		})
	}
}

// A store that comes back without its windows (a Redis restarted without
// persistence) is told what every node admitted in the last window before
// it grants again: no window holds more than the limit across the loss.
func TestBudgetsStoreLosesItsWindow(t *testing.T) {
	const window = 3 * time.Second
	cases := []struct {
		name     string
		down     time.Duration // how long the store is away
		leaseFor time.Duration // a block's life (0: default)
	}{
		{"restart at once", 0, 0},
		{"down a moment", window / 10, 0},
		// Blocks live longer than rebuildWait: their holders make no
		// store call for a while, yet tell the new window in time.
		{"long blocks", 0, window / 2},
		// Two nodes go idle just before the loss: they make no store
		// call of their own, yet their part of the window is told.
		{"idle nodes with history", 0, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := NewInmemStore()
			lim := limiter.Limits{Requests: 300}
			leaseFor := max(c.leaseFor, 0)
			s := newSim(t, st, 3, Config{Key: "lost", Limits: lim, Window: window, LeaseFor: leaseFor})
			rng := rand.New(rand.NewPCG(7, 8))
			tokens := func() int64 { return 100 }
			shares := []float64{0.5, 0.3, 0.2}
			s.run(window+window/2, 600, shares, rng, tokens)
			if c.leaseFor < 0 {
				shares = []float64{1, 0, 0}
				s.run(window/2, 600, shares, rng, tokens)
			}
			st.Down(true)
			st.Lose()
			s.run(c.down, 600, shares, rng, tokens)
			st.Down(false)
			s.run(2*window, 600, shares, rng, tokens)
			maxReq, _, _, _ := s.audit(s.now)
			var rebuilt uint64
			for _, n := range s.nodes {
				rebuilt += n.b.Stats(s.now).Rebuilt
			}
			t.Logf("admitted %d; fullest window %d of %d; windows rebuilt %d times", len(s.got), maxReq, lim.Requests, rebuilt)
			if maxReq > lim.Requests {
				t.Errorf("a window held %d requests, limit %d", maxReq, lim.Requests)
			}
		})
	}
}

// A budget idle for longer than a window finds its window emptied, not
// lost: its first requests after are admitted at once (not held back as
// after a Redis that lost its data).
func TestBudgetsIdleThenBusy(t *testing.T) {
	const window = 3 * time.Second
	for stName, st := range stores(t) {
		t.Run(stName, func(t *testing.T) {
			s := newSim(t, st, 3, Config{Key: t.Name(), Limits: limiter.Limits{Requests: 300}, Window: window})
			rng := rand.New(rand.NewPCG(9, 10))
			tokens := func() int64 { return 1 }
			shares := []float64{0.5, 0.3, 0.2}
			s.run(window/2, 300, shares, rng, tokens)
			s.run(window+window/2, 0, shares, rng, tokens) // idle
			resumed := s.now
			s.run(200*time.Millisecond, 300, shares, rng, tokens)
			var early int
			for _, a := range s.got {
				if a.at >= resumed {
					early++
				}
			}
			t.Logf("admitted %d in the first 200ms after an idle spell of %v", early, window+window/2)
			if early < 10 {
				t.Errorf("only %d admitted in the 200ms after an idle spell", early)
			}
		})
	}
}

// A budget seeded with usage counted elsewhere (a tenant's owner starting
// a shared budget from its own window) grants nothing before the store
// holds the seed, and never grants it again; carried slots stay taken
// until released.
func TestBudgetSeed(t *testing.T) {
	const window = time.Second
	for stName, st := range stores(t) {
		t.Run(stName, func(t *testing.T) {
			cfg := Config{Key: t.Name(), Limits: limiter.Limits{Requests: 100, Concurrency: 10}, Window: window}
			s := newSim(t, st, 2, cfg)
			width := int64(window) / Span
			seedAt := (s.now - int64(100*time.Millisecond)) / width
			owner, edge := s.nodes[0], s.nodes[1]
			owner.b.Seed([]Use{{Bucket: seedAt, Amount: Amount{Requests: 60}}}, 4)
			if _, d := owner.b.Take(s.now, 0); d.Allowed || d.Renewal == nil {
				t.Fatalf("a budget not seeded yet admitted: %+v", d)
			}
			owner.l.Maintain(context.Background())
			select {
			case <-owner.b.Seeded():
			default:
				t.Fatal("not seeded after a round with the store up")
			}
			used, err := storeUsed(st, owner.b, s.now)
			if err != nil || used.Requests != 60 {
				t.Fatalf("store holds %+v (%v), want the seed's 60 requests", used, err)
			}
			// Both nodes take all they can within the seed's window.
			var tickets []struct {
				n  simNode
				tk Ticket
			}
			admitted := 0
			for range 300 {
				for _, n := range []simNode{owner, edge} {
					n.l.Maintain(context.Background())
					if tk, d := n.b.Take(s.now, 0); d.Allowed {
						admitted++
						tickets = append(tickets, struct {
							n  simNode
							tk Ticket
						}{n, tk})
					}
				}
				s.now += int64(time.Millisecond)
			}
			if admitted != 6 {
				// 10 slots, 4 carried: 6 more calls at once.
				t.Errorf("%d calls admitted beside 4 carried, concurrency 10", admitted)
			}
			for range 4 {
				owner.b.ReleaseCarried()
			}
			for _, x := range tickets {
				x.n.b.Finish(s.now, &x.tk, 0)
			}
			for range 500 {
				for _, n := range []simNode{owner, edge} {
					n.l.Maintain(context.Background())
					if tk, d := n.b.Take(s.now, 0); d.Allowed {
						admitted++
						n.b.Finish(s.now, &tk, 0)
					}
				}
				s.now += int64(time.Millisecond)
			}
			// 800 ms after the seed's bucket: still one window.
			if admitted > 40 {
				t.Errorf("%d admitted in the window the seed's 60 are in, limit 100", admitted)
			}
			if admitted < 30 {
				t.Errorf("only %d admitted of the 40 the seed leaves", admitted)
			}
			t.Logf("%d admitted beside the seed's 60", admitted)
		})
	}
}

// storeUsed reads what b's window holds in st, granting nothing.
func storeUsed(st Store, b *Budget, now int64) (Amount, error) {
	r, err := st.Grant(context.Background(), b.windowKey, GrantRequest{Now: now / b.width, Expires: now / b.width,
		Limit: Amount{b.cfg.Limits.Requests, b.cfg.Limits.Tokens}, KeyTTL: time.Minute})
	return r.Used, err
}

// A fenced window grants nothing more to any node, even after it emptied
// (the script drops an empty window's hash at once), and what the fence
// reported bounds everything admitted on it afterwards: the blocks
// outstanding were counted whole.
func TestBudgetFence(t *testing.T) {
	const window = time.Second
	for stName, st := range stores(t) {
		t.Run(stName, func(t *testing.T) {
			cfg := Config{Key: t.Name(), Limits: limiter.Limits{Requests: 100}, Window: window}
			s := newSim(t, st, 2, cfg)
			a, b := s.nodes[0], s.nodes[1]
			took := 0
			for range 20 {
				a.l.Maintain(context.Background())
				if _, d := a.b.Take(s.now, 0); d.Allowed {
					took++
				}
				s.now += int64(time.Millisecond)
			}
			if took == 0 {
				t.Fatal("nothing admitted before the fence")
			}
			used, err := b.l.Fence(context.Background(), b.b, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if used.Requests < int64(took) {
				t.Fatalf("the fence reports %d requests, %d were admitted", used.Requests, took)
			}
			after := 0
			for range int(2 * window / time.Millisecond) {
				for _, n := range []simNode{a, b} {
					n.l.Maintain(context.Background())
					if _, d := n.b.Take(s.now, 0); d.Allowed {
						after++
					}
				}
				s.now += int64(time.Millisecond)
			}
			if int64(took+after) > used.Requests {
				t.Errorf("%d admitted in all, the fence reported %d", took+after, used.Requests)
			}
			if !a.b.Fenced() || !b.b.Fenced() {
				t.Errorf("fenced: a %v, b %v", a.b.Fenced(), b.b.Fenced())
			}
			t.Logf("%d before the fence (it reported %d), %d after", took, used.Requests, after)
		})
	}
}

// A line of requests waiting on a node counts in the block it asks for:
// the node with 50 waiting gets a block for them, the node without one a
// block for its rate. A line that keeps retrying past the demand's
// intervals still gets blocks; the watcher hears of room on a give-back
// and after a round of store work.
func TestBudgetBacklog(t *testing.T) {
	const window = 8 * time.Second
	for stName, st := range stores(t) {
		t.Run(stName, func(t *testing.T) {
			now := int64(1000 * time.Hour)
			clock := func() int64 { return now }
			cfg := Config{Key: t.Name(), Limits: limiter.Limits{Requests: 1000}, Window: window}
			mk := func(node string, waiting int) (*Leaser, *Budget, *int) {
				l := NewLeaser(LeaserConfig{Store: st, Node: node, Clock: clock})
				b := l.Budget(cfg, func() int { return 2 })
				rooms := new(int)
				b.Watch(func() { *rooms++ }, func() int { return waiting }, nil)
				return l, b, rooms
			}
			la, a, _ := mk("a", 0)
			lb, b, roomsB := mk("b", 50)
			for _, nb := range []*Budget{a, b} {
				if _, d := nb.Take(now, 1); d.Allowed {
					t.Fatal("admitted before any block")
				}
			}
			la.Maintain(context.Background())
			lb.Maintain(context.Background())
			leftA, leftB := a.Stats(now).Left.Requests, b.Stats(now).Left.Requests
			t.Logf("block without a line %d, with 50 waiting %d", leftA, leftB)
			if leftB < 50 || leftB < leftA+45 {
				t.Errorf("the node with 50 waiting got a block of %d (the other %d)", leftB, leftA)
			}
			if *roomsB == 0 {
				t.Error("no room told after a round that granted a block")
			}
			// The line drains, then waits past two demand intervals
			// (a block's life each) retrying: it is still wanted.
			for range leftB {
				tk, d := b.Retake(now, 1)
				if !d.Allowed {
					break
				}
				before := *roomsB
				b.Cancel(now, &tk) // given back: room again
				if *roomsB == before {
					t.Fatal("no room told on a give-back")
				}
				tk, _ = b.Retake(now, 1)
				_ = tk
			}
			now += 3 * int64(cfg.Window/8)
			b.Retake(now, 1)
			lb.Maintain(context.Background())
			if left := b.Stats(now).Left.Requests; left < 50 {
				t.Errorf("a line retrying after its demand rolled out got a block of %d", left)
			}
		})
	}
}
