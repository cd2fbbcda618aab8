package lease

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ringgate/ringgate/fair"
	"github.com/ringgate/ringgate/limiter"
)

// flowSim is nodes leasing one budget on a simulated clock, each serving
// flows that ask at a steady rate; a request refused is gone (no line).
type flowSim struct {
	now   int64
	nodes []*Leaser
	bs    []*Budget
	// flows[i] are node i's flows; rate per window; calls hold a slot
	// for hold.
	flows [][]Flow
	rate  map[string]float64
	hold  int64
	got   map[string]int64 // admitted per flow key, from count on
	count int64
}

func newFlowSim(st Store, cfg Config, flows [][]Flow, rate map[string]float64) *flowSim {
	s := &flowSim{now: int64(1000 * time.Hour), flows: flows, rate: rate, got: map[string]int64{}}
	for i := range flows {
		l := NewLeaser(LeaserConfig{Store: st, Node: fmt.Sprintf("n%d", i), Clock: func() int64 { return s.now }})
		s.nodes = append(s.nodes, l)
		s.bs = append(s.bs, l.Budget(cfg, func() int { return len(flows) }))
	}
	return s
}

type running struct {
	b    *Budget
	tk   Ticket
	ends int64
}

// run advances the clock by dur in 1 ms steps: every flow asks at its
// rate, each node does its store round every 10 ms. It reports the most
// calls in flight at once over all nodes (the provider's concurrency).
func (s *flowSim) run(window, dur time.Duration) (peak int) {
	step := int64(time.Millisecond)
	carry := map[string]float64{}
	var calls []running
	for end := s.now + int64(dur); s.now < end; s.now += step {
		for i, l := range s.nodes {
			if (s.now/step+int64(3*i))%10 == 0 {
				l.Maintain(context.Background())
			}
		}
		keep := calls[:0]
		for _, c := range calls {
			if c.ends <= s.now {
				c.b.Finish(s.now, &c.tk, 100)
			} else {
				keep = append(keep, c)
			}
		}
		calls = keep
		for i, fs := range s.flows {
			for _, f := range fs {
				carry[f.Key] += s.rate[f.Key] * float64(step) / float64(window)
				for ; carry[f.Key] >= 1; carry[f.Key]-- {
					tk, d := s.bs[i].TakeFor(s.now, 100, &f)
					if !d.Allowed {
						continue
					}
					if s.now >= s.count {
						s.got[f.Key]++
					}
					calls = append(calls, running{s.bs[i], tk, s.now + s.hold})
					peak = max(peak, len(calls))
				}
			}
		}
	}
	for _, c := range calls {
		c.b.Finish(s.now, &c.tk, 100)
	}
	return peak
}

func flow(key string, band int, w float64) Flow {
	return Flow{Key: key, Band: band, Weight: Weights{Requests: w, Tokens: w, Concurrency: w}}
}

// Two flows on one node and one on another, each asking twice its share:
// each node gets its flows' shares of the budget, not half of it. On
// requests, tokens and slots, with equal and unequal weights, a flow
// wanting less than its share, and batch flows after an interactive one.
func TestBudgetDividedAmongFlows(t *testing.T) {
	const window = 3 * time.Second
	cases := []struct {
		name   string
		limits limiter.Limits
		flows  [][]Flow
		rate   map[string]float64 // per window
		hold   time.Duration
		// want is each node's part, per window or calls at once for
		// slots: the flows' shares added up (within a node the router's
		// line divides it, by the same weights).
		want []float64
	}{
		{name: "requests", limits: limiter.Limits{Requests: 150},
			flows: [][]Flow{{flow("a", 0, 1), flow("b", 0, 1)}, {flow("c", 0, 1)}},
			rate:  map[string]float64{"a": 100, "b": 100, "c": 100}, want: []float64{100, 50}},
		{name: "tokens by weight", limits: limiter.Limits{Tokens: 15000},
			flows: [][]Flow{{flow("a", 0, 1), flow("b", 0, 2)}, {flow("c", 0, 3)}},
			rate:  map[string]float64{"a": 200, "b": 200, "c": 200}, want: []float64{75, 75}},
		{name: "one wants less", limits: limiter.Limits{Requests: 150},
			flows: [][]Flow{{flow("a", 0, 1), flow("b", 0, 1)}, {flow("c", 0, 1)}},
			rate:  map[string]float64{"a": 20, "b": 200, "c": 200}, want: []float64{85, 65}},
		{name: "batch after interactive", limits: limiter.Limits{Requests: 150},
			flows: [][]Flow{{flow("a", 1, 1), flow("b", 1, 1)}, {flow("c", 0, 1)}},
			rate:  map[string]float64{"a": 100, "b": 100, "c": 100}, want: []float64{50, 100}},
		{name: "slots", limits: limiter.Limits{Concurrency: 6}, hold: 100 * time.Millisecond,
			flows: [][]Flow{{flow("a", 0, 1), flow("b", 0, 1)}, {flow("c", 0, 1)}},
			// 4 calls at once each: 120 a window of 3 s for 100 ms.
			rate: map[string]float64{"a": 120, "b": 120, "c": 120}, want: []float64{4, 2}},
	}
	for stName, st := range stores(t) {
		for _, c := range cases {
			t.Run(stName+"/"+c.name, func(t *testing.T) {
				cfg := Config{Key: t.Name(), Limits: c.limits, Window: window, BandFloor: 0.25}
				s := newFlowSim(st, cfg, c.flows, c.rate)
				s.hold = int64(c.hold)
				s.count = s.now + int64(window)
				s.run(window, 4*window)
				for i, want := range c.want {
					var got float64
					for _, f := range c.flows[i] {
						got += float64(s.got[f.Key]) / 3 // windows counted
					}
					if c.hold > 0 {
						got = got * float64(c.hold) / float64(window) // calls at once
					}
					t.Logf("node %d: %.1f (want %.1f)", i, got, want)
					if math.Abs(got-want) > 0.1*want {
						t.Errorf("node %d got %.1f, want %.1f ± 10 %%", i, got, want)
					}
				}
			})
		}
	}
}

// A request its flow counted in the demand and that another limit then
// refused (Cancel) leaves the demand: that limit bounds the flow, and a
// part sized to it would be left unused.
func TestCancelTakesBackTheAsk(t *testing.T) {
	b := NewBudget(Config{Key: "k", Limits: limiter.Limits{Requests: 100}, Window: time.Second}, nil)
	b.storeless = true
	f := flow("a", 0, 1)
	now := int64(2 * time.Hour)
	b.outage.down.Store(true)
	b.outage.since = now - int64(time.Hour)
	for range 10 {
		tk, d := b.TakeFor(now, 5, &f)
		if d.Allowed {
			b.Cancel(now, &tk)
		}
	}
	b.AskFor(now, 5, &f)
	b.mu.Lock()
	fs := b.fair.flows[flowKey{"a", 0}]
	b.mu.Unlock()
	if fs == nil || fs.asked != (Amount{1, 5}) {
		t.Fatalf("flow's demand after 10 cancelled takes and an ask: %+v, want 1 request of 5 tokens", fs)
	}
}

func TestDemandStore(t *testing.T) {
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			now := int64(1000 * time.Hour)
			if _, err := st.Demand(ctx, "d", "a", []byte("A\x00:1"), now, time.Second); err != nil {
				t.Fatal(err)
			}
			got, err := st.Demand(ctx, "d", "b", []byte("B"), now+int64(500*time.Millisecond), time.Second)
			if err != nil || len(got) != 2 || !bytes.Equal(got["a"], []byte("A\x00:1")) || string(got["b"]) != "B" {
				t.Fatalf("both reports: %q %v", got, err)
			}
			got, err = st.Demand(ctx, "d", "b", []byte("B2"), now+int64(1200*time.Millisecond), time.Second)
			if err != nil || len(got) != 1 || string(got["b"]) != "B2" {
				t.Fatalf("a's report lapsed, b's replaced: %q %v", got, err)
			}
		})
	}
}

func TestReportRoundTrip(t *testing.T) {
	in := [3][]fair.Want{{{Band: 0, Weight: 1, Amount: 2.5}}, nil, {{Band: 1, Weight: 3, Amount: 0}, {Band: 0, Weight: 0.5, Amount: 7}}}
	out, ok := decodeReport(encodeReport(in))
	if !ok || len(out[0]) != 1 || out[0][0] != in[0][0] || len(out[1]) != 0 || len(out[2]) != 2 || out[2][1] != in[2][1] {
		t.Fatalf("%v %v", out, ok)
	}
	for _, bad := range [][]byte{nil, {2}, {1, 5}, append(encodeReport(in), 0)} {
		if _, ok := decodeReport(bad); ok {
			t.Errorf("%v read as a report", bad)
		}
	}
}

func FuzzDecodeReport(f *testing.F) {
	f.Add(encodeReport([3][]fair.Want{{{Band: 0, Weight: 1, Amount: 2.5}}, nil, nil}))
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		w, ok := decodeReport(b)
		if !ok {
			return
		}
		for _, ws := range w {
			for _, x := range ws {
				if x.Band < 0 || x.Band >= fair.Bands || !(x.Weight > 0) || !(x.Amount >= 0) || math.IsInf(x.Weight, 0) || math.IsInf(x.Amount, 0) {
					t.Fatalf("decoded a want that cannot be divided: %+v", x)
				}
			}
		}
	})
}

// A node whose slot part falls below the calls it has running keeps
// holding their slots until they end, and admits no more: a slot given up
// under a running call went to another node at once (6 calls at once for
// a concurrency of 4).
//
// Sequence: concurrency 4; node n0 (flow a) fills all 4 slots with long
// calls. Then node n1's flow b has 4 requests waiting in its line. Both
// report: a wants 4 (inflight), b wants 4 (waiting): parts 2 and 2. n0's
// maintain sees slots.held 4 > part 2 and holds 2; n1 holds 2 and admits
// 2: 6 calls at once, limit 4.
func TestSlotPartBelowCallsRunningHoldsThem(t *testing.T) {
	for stName, st := range stores(t) {
		t.Run(stName, func(t *testing.T) {
			const limit = 4
			now := int64(1000 * time.Hour)
			clock := func() int64 { return now }
			cfg := Config{Key: t.Name(), Limits: limiter.Limits{Concurrency: limit}, Window: 3 * time.Second, BandFloor: 0.25}
			var ls []*Leaser
			var bs []*Budget
			for i := range 2 {
				l := NewLeaser(LeaserConfig{Store: st, Node: fmt.Sprintf("n%d", i), Clock: clock})
				ls = append(ls, l)
				bs = append(bs, l.Budget(cfg, func() int { return 2 }))
			}
			fa, fb := flow("a", 0, 1), flow("b", 0, 1)
			bWaiting := 0
			bs[1].Watch(func() {}, func() int { return bWaiting }, func(fn func(string, int, int)) {
				if bWaiting > 0 {
					fn("b", 0, bWaiting)
				}
			})
			var runningA, runningB int
			step := int64(time.Millisecond)
			peak := 0
			for i := 0; i < 3000; i++ {
				if i%10 == 0 {
					ls[0].Maintain(context.Background())
				}
				if i%10 == 3 {
					ls[1].Maintain(context.Background())
				}
				if runningA < limit {
					if _, d := bs[0].TakeFor(now, 0, &fa); d.Allowed {
						runningA++ // never finishes: a long stream
					}
				}
				if i >= 500 && runningB < limit {
					if bWaiting == 0 {
						bWaiting = limit
						for range limit {
							bs[1].AskFor(now, 0, &fb)
						}
					}
					if _, d := bs[1].RetakeFor(now, 0, &fb); d.Allowed {
						runningB++
						bWaiting--
					}
				}
				peak = max(peak, runningA+runningB)
				now += step
			}
			sa, sb := bs[0].Stats(now), bs[1].Stats(now)
			t.Logf("running: n0 %d (held %d, part %d), n1 %d (held %d, part %d); peak %d, limit %d",
				runningA, sa.SlotsHeld, sa.PartSlots, runningB, sb.SlotsHeld, sb.PartSlots, peak, limit)
			if peak > limit {
				t.Errorf("%d calls at once at the provider, concurrency %d", peak, limit)
			}
		})
	}
}

// A take that another limit then refuses (Cancel: the router takes the
// provider's budgets before the tenant's own limits) leaves the node's
// charge in the window (capLocked): a tenant flooding past its own limit
// does not spend its node's part on nothing. Counted there, it starved the
// node's other tenants while the provider was all but idle (y got 23 of 60).
//
// Sequence: 2 nodes, rpm 300. n0: flow y asks 60 a window (all sent), flow
// x asks 600 a window, every one of them cancelled at once (its tenant's
// own limit refuses). n1: flow z asks 60 a window. Nothing else: 120 of
// 300 reach the provider, and y should get all 60.
func TestCancelledTakesLeaveThePart(t *testing.T) {
	const window = 3 * time.Second
	for stName, st := range stores(t) {
		t.Run(stName, func(t *testing.T) {
			now := int64(1000 * time.Hour)
			cfg := Config{Key: t.Name(), Limits: limiter.Limits{Requests: 300}, Window: window, BandFloor: 0.25}
			var ls []*Leaser
			var bs []*Budget
			for i := range 2 {
				l := NewLeaser(LeaserConfig{Store: st, Node: fmt.Sprintf("n%d", i), Clock: func() int64 { return now }})
				ls = append(ls, l)
				bs = append(bs, l.Budget(cfg, func() int { return 2 }))
			}
			fx, fy, fz := flow("x", 0, 1), flow("y", 0, 1), flow("z", 0, 1)
			step := int64(time.Millisecond)
			got := map[string]int{}
			var cx, cy, cz float64
			countFrom := now + int64(window)
			for end := now + int64(4*window); now < end; now += step {
				if (now/step)%10 == 0 {
					ls[0].Maintain(context.Background())
				}
				if (now/step+3)%10 == 0 {
					ls[1].Maintain(context.Background())
				}
				cx += 600 * float64(step) / float64(window)
				cy += 60 * float64(step) / float64(window)
				cz += 60 * float64(step) / float64(window)
				for ; cx >= 1; cx-- {
					if tk, d := bs[0].TakeFor(now, 10, &fx); d.Allowed {
						bs[0].Cancel(now, &tk) // its tenant's limit refused it
					}
				}
				for ; cy >= 1; cy-- {
					if tk, d := bs[0].TakeFor(now, 10, &fy); d.Allowed {
						bs[0].Finish(now, &tk, 10)
						if now >= countFrom {
							got["y"]++
						}
					}
				}
				for ; cz >= 1; cz-- {
					if tk, d := bs[1].TakeFor(now, 10, &fz); d.Allowed {
						bs[1].Finish(now, &tk, 10)
						if now >= countFrom {
							got["z"]++
						}
					}
				}
			}
			s0 := bs[0].Stats(now)
			t.Logf("a window: y %d of 60 asked, z %d of 60 asked (rpm 300); n0 part %d, part spent %d times",
				got["y"]/3, got["z"]/3, s0.Part.Requests, s0.PartSpent)
			if got["y"]/3 < 54 {
				t.Errorf("y got %d a window of the 60 it asked, with the provider at %d of 300", got["y"]/3, (got["y"]+got["z"])/3)
			}
		})
	}
}

// A node that has never finished a call on a concurrency budget (just
// started, or new to it) wants a slot for a flow that asked, though
// nothing of the flow waits in a line (queue waits of 0: a refused request
// is gone) and no call's hold time is known yet. Wanting 0, its part was 0
// while the others saturated the budget: it never ran a call, so never
// learned one's length.
//
// Sequence: concurrency 6, calls of 100 ms; n0's flow a asks 3× the slots
// for a window alone; then n1's flow b (same weight) starts asking as
// much. b's fair share is 3 slots.
func TestFreshNodeGetsItsSlots(t *testing.T) {
	const window = 3 * time.Second
	for stName, st := range stores(t) {
		t.Run(stName, func(t *testing.T) {
			cfg := Config{Key: t.Name(), Limits: limiter.Limits{Concurrency: 6}, Window: window, BandFloor: 0.25}
			flows := [][]Flow{{flow("a", 0, 1)}, {flow("b", 0, 1)}}
			// 6 slots serve 180 calls of 100 ms a window; a asks 3× that.
			s := newFlowSim(st, cfg, flows, map[string]float64{"a": 540, "b": 0})
			s.hold = int64(100 * time.Millisecond)
			s.run(window, window)
			s.rate["b"] = 540
			s.got = map[string]int64{}
			s.count = s.now + int64(window)
			s.run(window, 3*window)
			perWindow := func(k string) float64 { return float64(s.got[k]) / 2 }
			sb := s.bs[1].Stats(s.now)
			t.Logf("a %.0f, b %.0f calls a window (fair: 90 each, 180 in all); n1 part %d slots, holds %d, wanted %d",
				perWindow("a"), perWindow("b"), sb.PartSlots, sb.SlotsHeld, sb.DemandSlots)
			if perWindow("b") < 45 {
				t.Errorf("b got %.0f calls a window, fair share 90", perWindow("b"))
			}
		})
	}
}

// calls in flight never exceed the concurrency, one node alone.
func TestSlotsPeakOneNode(t *testing.T) {
	const window = 3 * time.Second
	for stName, st := range stores(t) {
		t.Run(stName, func(t *testing.T) {
			cfg := Config{Key: t.Name(), Limits: limiter.Limits{Concurrency: 6}, Window: window, BandFloor: 0.25}
			s := newFlowSim(st, cfg, [][]Flow{{flow("a", 0, 1)}}, map[string]float64{"a": 540})
			s.hold = int64(100 * time.Millisecond)
			peak := s.run(window, 2*window)
			t.Logf("peak %d, limit 6; admitted %d in %v", peak, s.got["a"], 2*window)
			if peak > 6 {
				t.Errorf("peak %d calls at once, limit 6", peak)
			}
		})
	}
}

// A flow whose requests keep waiting in its node's line wants all there is,
// whatever it asks: clients that wait for an answer before they ask again
// ask no faster than they are let in, so what they ask is what they got.
// Its node's part is its weight's share, not the trickle it asks at. One
// waiting at a single report wants what it asks.
func TestWaitingFlowWantsItsWeightsShare(t *testing.T) {
	const window = 3 * time.Second
	for stName, st := range stores(t) {
		t.Run(stName, func(t *testing.T) {
			cfg := Config{Key: t.Name(), Limits: limiter.Limits{Requests: 150}, Window: window, BandFloor: 0.25}
			flows := [][]Flow{{flow("x", 0, 1)}, {flow("y", 0, 1)}}
			s := newFlowSim(st, cfg, flows, map[string]float64{"x": 10, "y": 300})
			waiting := 16
			s.bs[0].Watch(func() {}, func() int { return waiting }, func(fn func(string, int, int)) { fn("x", 0, waiting) })
			s.run(window, 2*window)
			p0, p1 := s.bs[0].Stats(s.now).Part.Requests, s.bs[1].Stats(s.now).Part.Requests
			t.Logf("x asking 10 a window with 16 waiting: its node's part %d; y's %d", p0, p1)
			if p0 != 75 || p1 != 75 {
				t.Errorf("parts %d and %d, want 75 each", p0, p1)
			}
			// Waiting at one report only: its rate decides again.
			waiting = 0
			s.run(window, window)
			p0 = s.bs[0].Stats(s.now).Part.Requests
			t.Logf("nothing waiting: its node's part %d", p0)
			if p0 > 40 {
				t.Errorf("x's node keeps a part of %d with nothing waiting, asking 10 a window", p0)
			}
		})
	}
}

// A node whose part of the window is used asks for no grant, yet hears
// what the window holds within a report: the provider's remaining is
// weighed against that (Observe), and a figure from the node's last grant,
// before the other nodes' grants since, made it charge those grants again
// as the key's use elsewhere, so the next window opened late by as much.
//
// Sequence: rpm 300, n0 with one flow and n1 with three, each asking twice
// its share of 75; after three windows the provider answers n0's call with
// what the cluster really left: 300 less what the window holds.
func TestSpentPartHearsTheWindow(t *testing.T) {
	const window = 3 * time.Second
	for stName, st := range stores(t) {
		t.Run(stName, func(t *testing.T) {
			cfg := Config{Key: t.Name(), Limits: limiter.Limits{Requests: 300}, Window: window, BandFloor: 0.25}
			flows := [][]Flow{{flow("a", 0, 1)}, {flow("b", 0, 1), flow("c", 0, 1), flow("d", 0, 1)}}
			s := newFlowSim(st, cfg, flows, map[string]float64{"a": 150, "b": 150, "c": 150, "d": 150})
			s.run(window, 3*window)
			g, err := st.Grant(context.Background(), s.bs[0].windowKey, GrantRequest{Now: s.now / s.bs[0].width,
				Expires: s.now / s.bs[0].width, Limit: Amount{Requests: 300}})
			if err != nil {
				t.Fatal(err)
			}
			heard := s.bs[0].Stats(s.now).Used.Requests
			s.bs[0].Observe(s.now, Observed{Limited: true, Remaining: max(0, 300-g.Used.Requests), Reset: window}, Observed{})
			s.run(window, 20*time.Millisecond)
			st0 := s.bs[0].Stats(s.now)
			t.Logf("the window holds %d of 300, n0 last heard %d (part %d, spent %d times); corrections %d",
				g.Used.Requests, heard, st0.Part.Requests, st0.PartSpent, st0.Corrections)
			if st0.Corrections != 0 {
				t.Errorf("a truthful remaining of %d was charged as the key's use elsewhere", 300-g.Used.Requests)
			}
		})
	}
}
