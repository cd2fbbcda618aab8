package limiter

import (
	"fmt"
	"math/rand"
	"sort"
	"testing"
	"time"
)

// geometry changes exercised by the rebucket tests: window and slot TTL,
// before and after.
var rebucketCases = []struct {
	name     string
	w1, w2   time.Duration
	ttl1, tt time.Duration
}{
	{"window 2x longer", 10 * time.Second, 20 * time.Second, 30 * time.Second, 30 * time.Second},
	{"window 2x shorter", 10 * time.Second, 5 * time.Second, 30 * time.Second, 30 * time.Second},
	{"window 7x shorter", 14 * time.Second, 2 * time.Second, 30 * time.Second, 30 * time.Second},
	{"window 6x longer", 2 * time.Second, 12 * time.Second, 30 * time.Second, 30 * time.Second},
	{"window 1.37x longer", 10 * time.Second, 13700 * time.Millisecond, 30 * time.Second, 30 * time.Second},
	{"window 1.003x longer", 10 * time.Second, 10030 * time.Millisecond, 30 * time.Second, 30 * time.Second},
	{"window 1.37x shorter", 13700 * time.Millisecond, 10 * time.Second, 30 * time.Second, 30 * time.Second},
	{"slot ttl 3x shorter", 10 * time.Second, 10 * time.Second, 30 * time.Second, 10 * time.Second},
	{"slot ttl 3x longer", 10 * time.Second, 10 * time.Second, 10 * time.Second, 30 * time.Second},
	{"both change", 10 * time.Second, 6 * time.Second, 20 * time.Second, 45 * time.Second},
}

// When a charge stops counting after a rebucket: never before one new window
// after it was made; never before its old expiry if the window did not get
// shorter; at most one new bucket after the new window from the end of its
// old bucket. A charge the old window had dropped stays dropped.
func TestRebucketChargeExpiry(t *testing.T) {
	for _, tc := range rebucketCases {
		if tc.w1 == tc.w2 {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(11))
			for i := 0; i < 400; i++ {
				at := t0 + rng.Int63n(int64(tc.w1))
				reload := at + rng.Int63n(int64(tc.w1)+int64(tc.w1)/Buckets*2)
				if i%5 == 0 {
					reload = at + rng.Int63n(int64(tc.w1)/Buckets+1) // often in the same bucket
				}
				old := NewTenant(Limits{Requests: 10}, tc.w1, time.Minute)
				tn := NewTenant(Limits{Requests: 10}, tc.w1, time.Minute)
				old.Admit(at, 0)
				tn.Admit(at, 0)
				oldExpiry := reload + int64(old.Peek(reload).ResetRequests)
				counted := old.Usage(reload).Requests == 1
				tn.Rebucket(reload, tc.w2, time.Minute)
				if !counted {
					if u := tn.Usage(reload); u.Requests != 0 {
						t.Fatalf("charge at %d dropped by the old window by the reload at %d counts again", at-t0, reload-t0)
					}
					continue
				}
				l1, l2, w1, w2 := int64(old.Window()), int64(tn.Window()), int64(tc.w1)/Buckets, int64(tc.w2)/Buckets
				if tn.Usage(reload).Requests == 0 {
					// Dropped at once: only a charge that no window of the
					// new length after the reload can hold.
					if l2 >= l1 || at+l2 > reload {
						t.Fatalf("charge at %d counted by the old window at the reload (%d), dropped by the rebucket", at-t0, reload-t0)
					}
					continue
				}
				expiry := reload + int64(tn.Peek(reload).ResetRequests)
				if a, b := tn.Usage(expiry-1).Requests, tn.Usage(expiry).Requests; a != 1 || b != 0 {
					t.Fatalf("charge at %d, reload at %d: Reset says it stops counting at %d, but it counts %d then %d",
						at-t0, reload-t0, expiry-t0, a, b)
				}
				if expiry < at+l2 {
					t.Fatalf("charge at %d, reload at %d: stops counting at %d, before one new window (%d) after it",
						at-t0, reload-t0, expiry-t0, at+l2-t0)
				}
				if l2 >= l1 && expiry < oldExpiry {
					t.Fatalf("charge at %d, reload at %d: stops counting at %d under a longer window, before its old expiry %d",
						at-t0, reload-t0, expiry-t0, oldExpiry-t0)
				}
				if end := (at/w1 + 1) * w1; expiry > end+l2+w2 {
					t.Fatalf("charge at %d, reload at %d: counts until %d, more than a new bucket past %d",
						at-t0, reload-t0, expiry-t0, end+l2-t0)
				}
			}
		})
	}
}

// A tenant at its limit stays refused across a rebucket, in every direction,
// until one new window after its charges; then it admits again.
func TestRebucketAtLimitStillRefuses(t *testing.T) {
	for _, tc := range rebucketCases {
		t.Run(tc.name, func(t *testing.T) {
			l := Limits{Requests: 5, Tokens: 5000, Concurrency: 5}
			tn := NewTenant(l, tc.w1, tc.ttl1)
			for i := 0; i < 5; i++ {
				tk, d := tn.Admit(t0+int64(i), 100)
				if !d.Allowed {
					t.Fatalf("admission %d refused", i)
				}
				tn.Finish(t0+int64(i), &tk, 100)
			}
			reload := t0 + int64(time.Second)
			tn.Rebucket(reload, tc.w2, tc.tt)
			if got := tn.Window(); got != tc.w2 {
				t.Fatalf("window %v after the rebucket, want %v", got, tc.w2)
			}
			_, d := tn.Admit(reload, 1)
			if d.Allowed || d.Limited != Requests || d.RetryAfter <= 0 {
				t.Fatalf("at its limit, a rebucketed tenant decided %+v", d)
			}
			if u := tn.Usage(reload); u.Requests != 5 || u.Tokens != 500 || u.InFlight != 0 {
				t.Fatalf("usage after the rebucket: %+v", u)
			}
			free := reload + int64(d.RetryAfter)
			if free < t0+int64(tn.Window()) {
				t.Fatalf("capacity back at %v after the charges, before the new window %v", time.Duration(free-t0), tn.Window())
			}
			if _, d := tn.Admit(free-1, 1); d.Allowed {
				t.Fatal("admitted before Retry-After")
			}
			if _, d := tn.Admit(free, 1); !d.Allowed {
				t.Fatalf("refused at Retry-After: %+v", d)
			}
		})
	}
}

type rbCall struct {
	tn         *Tenant // the tenant it was admitted on
	tk         Ticket
	at, tokens int64 // admitted at, final tokens (settlement only credits back)
	end        int64 // released at; for a holder that vanished, its slot's TTL after at
	vanish     bool
}

// Demand at about twice the limits under the old geometry, a rebucket, and
// more of it under the new one, with calls in flight across the reload (some
// of them vanishing, never released). The audit counts what was admitted the
// way an upstream would: every trailing interval of the new window that ends
// at an admission after the reload holds at most the limits (counting what
// was admitted before the reload within the old window: all the limiter
// could know), and no more slots than allowed are held at any admission
// after it (a vanished holder's slot counts for its TTL, the shorter one if
// it was admitted before the reload). The same demand on a fresh tenant at
// the reload (what a reload used to do) is logged for comparison.
func TestRebucketNeverOverLimit(t *testing.T) {
	for _, tc := range rebucketCases {
		for _, lc := range []struct {
			name string
			l    Limits
		}{
			{"requests", Limits{Requests: 60}},
			{"tokens", Limits{Tokens: 20000}},
			{"slots", Limits{Concurrency: 4}},
			{"all three", Limits{Requests: 80, Tokens: 12000, Concurrency: 6}},
		} {
			t.Run(tc.name+"/"+lc.name, func(t *testing.T) {
				var worst, fresh, first, last float64
				const seeds = 4
				for seed := int64(1); seed <= seeds; seed++ {
					r := rebucketRun(t, rand.New(rand.NewSource(seed)), tc.w1, tc.w2, tc.ttl1, tc.tt, lc.l, false)
					f := rebucketRun(t, rand.New(rand.NewSource(seed)), tc.w1, tc.w2, tc.ttl1, tc.tt, lc.l, true)
					worst, fresh = max(worst, r.worst), max(fresh, f.worst)
					first, last = first+r.first/seeds, last+r.last/seeds
				}
				t.Logf("most of a limit held after the reload: %.1f%% rebucketed, %.1f%% with fresh windows; "+
					"requests used in the first new window %.1f%%, in the last two %.1f%%",
					100*worst, 100*fresh, 100*first, 100*last)
				if lc.l == (Limits{Requests: lc.l.Requests}) && last < 0.95 {
					t.Errorf("long after the reload, a rebucketed tenant uses %.1f%% of its requests under twice the demand", 100*last)
				}
			})
		}
	}
}

// rebucketFigures are shares of the limits in one run: the most any audited
// interval held of any limit (slots: at any admission), and the requests
// admitted in the first new window after the reload and, on average, in the
// windows of the last two (of the request limit; 0 without one).
type rebucketFigures struct{ worst, first, last float64 }

// rebucketRun drives a tenant through a reload and audits what it admitted
// after it, failing t unless fresh (a new tenant at the reload instead of
// Rebucket).
func rebucketRun(t *testing.T, rng *rand.Rand, w1, w2, ttl1, ttl2 time.Duration, l Limits, fresh bool) rebucketFigures {
	t.Helper()
	// Arrivals per nanosecond under a window w: twice the limit.
	rate := func(w time.Duration) float64 {
		switch {
		case l.Requests > 0:
			return 2 * float64(l.Requests) / float64(w)
		case l.Tokens > 0:
			return 2 * float64(l.Tokens) / 150 / float64(w) // 150 tokens a call on average
		}
		return 40 / float64(w)
	}
	slotLen := func(ttl time.Duration) int64 { w := NewWindow(0, ttl); return int64(w.Length()) }
	minTTL := min(slotLen(ttl1), slotLen(ttl2))

	tn := NewTenant(l, w1, ttl1)
	reload := t0 + 3*int64(w1) + rng.Int63n(int64(w1))
	stop := reload + 4*int64(max(w1, w2))
	var calls, open []*rbCall
	finishUntil := func(until int64) { // open is in order of end
		k := 0
		for ; k < len(open) && open[k].end <= until; k++ {
			c := open[k]
			c.tn.Finish(c.end, &c.tk, c.tokens)
		}
		open = open[k:]
	}
	now, reloaded := t0, false
	for now < stop {
		r := rate(w1)
		if reloaded {
			r = rate(w2)
		}
		next := now + 1 + int64(rng.ExpFloat64()/r)
		if !reloaded && next >= reload {
			finishUntil(reload)
			if fresh {
				// What a reload did: new, empty windows; the calls in flight
				// finish on the old tenant, which nobody reads any more.
				tn = NewTenant(l, w2, ttl2)
			} else {
				tn.Rebucket(reload, w2, ttl2)
			}
			now, reloaded = reload, true
			continue
		}
		finishUntil(next)
		now = next
		cost := int64(1)
		if l.Tokens > 0 {
			cost = 50 + rng.Int63n(200)
		}
		tk, d := tn.Admit(now, cost)
		if !d.Allowed {
			continue
		}
		c := &rbCall{tn: tn, tk: tk, at: now, tokens: cost - rng.Int63n(cost/2+1)}
		if rng.Intn(20) == 0 {
			c.vanish = true
			c.end = now + slotLen(ttl2)
			if !reloaded {
				c.end = now + minTTL
			}
		} else {
			c.end = now + 1 + rng.Int63n(minTTL/3)
			i := sort.Search(len(open), func(i int) bool { return open[i].end > c.end })
			open = append(open, nil)
			copy(open[i+1:], open[i:])
			open[i] = c
		}
		calls = append(calls, c)
	}
	if len(calls) == 0 {
		t.Fatal("nothing admitted")
	}

	// The audit, at every admission after the reload. calls are in time
	// order.
	length := int64(tn.Window())
	known := reload - int64(w1) // what the old window still held at the reload
	var f rebucketFigures
	var requests, tokens int64
	lo := 0
	var held []int64 // ends of the slots held
	for i, e := range calls {
		if e.at >= known {
			requests++
			tokens += e.tokens
		}
		for ; lo < i && calls[lo].at <= e.at-length; lo++ {
			if calls[lo].at >= known {
				requests--
				tokens -= calls[lo].tokens
			}
		}
		k := 0
		for _, end := range held {
			if end > e.at {
				held[k] = end
				k++
			}
		}
		held = append(held[:k], e.end)
		if e.at < reload {
			continue
		}
		slots := int64(len(held))
		over := ""
		switch {
		case l.Requests > 0 && requests > l.Requests:
			over = fmt.Sprintf("%d requests in the new window ending there, limit %d", requests, l.Requests)
		case l.Tokens > 0 && tokens > l.Tokens:
			over = fmt.Sprintf("%d tokens in the new window ending there, limit %d", tokens, l.Tokens)
		case l.Concurrency > 0 && slots > l.Concurrency:
			over = fmt.Sprintf("%d slots held, limit %d", slots, l.Concurrency)
		}
		if over != "" && !fresh {
			t.Fatalf("admission %v after the reload: %s", time.Duration(e.at-reload), over)
		}
		share := func(n, limit int64) float64 {
			if limit <= 0 {
				return 0
			}
			return float64(n) / float64(limit)
		}
		f.worst = max(f.worst, share(requests, l.Requests), share(tokens, l.Tokens), share(slots, l.Concurrency))
	}
	if l.Requests > 0 {
		in := func(from, to int64) (n int64) {
			for _, c := range calls {
				if c.at >= from && c.at < to {
					n++
				}
			}
			return n
		}
		f.first = float64(in(reload, reload+length)) / float64(l.Requests)
		const samples = 20
		for i := range samples {
			end := stop - int64(i)*length/samples
			f.last += float64(in(end-length, end)) / float64(l.Requests) / samples
		}
	}
	return f
}

// Calls admitted before a rebucket finish after it on the tenant's current
// windows: the slot they took is freed there, and their settlement, credit or
// debit, changes the tokens there, once.
func TestRebucketTicketsInFlight(t *testing.T) {
	type reload struct {
		after         time.Duration // since the admission
		window, slots time.Duration
	}
	const w, ttl = 10 * time.Second, 30 * time.Second
	cases := []struct {
		name    string
		reloads []reload
		finish  time.Duration // since the admission
		reserve int64
		actual  int64
	}{
		{"longer window, credit", []reload{{time.Second, 2 * w, ttl}}, 3 * time.Second, 500, 200},
		{"shorter window, credit", []reload{{time.Second, w / 3, ttl}}, 2 * time.Second, 500, 200},
		{"shorter window, debit", []reload{{time.Second, w / 3, ttl}}, 2 * time.Second, 300, 700},
		{"same bucket, longer", []reload{{time.Millisecond, 3 * w, ttl}}, 5 * time.Millisecond, 500, 100},
		{"same bucket, shorter", []reload{{time.Millisecond, w / 7, ttl}}, 5 * time.Millisecond, 500, 100},
		{"slot ttl shorter", []reload{{time.Second, w, ttl / 4}}, 4 * time.Second, 500, 100},
		{"slot ttl longer", []reload{{time.Second, w, ttl * 4}}, 4 * time.Second, 500, 600},
		{"three reloads", []reload{
			{time.Second, 2 * w, ttl / 2},
			{1500 * time.Millisecond, w / 2, ttl * 3},
			{1700 * time.Millisecond, 4 * time.Second, ttl},
		}, 1800 * time.Millisecond, 500, 250},
		{"settled after its bucket left the new window: credit dropped", []reload{{time.Second, w / 5, ttl}},
			5 * time.Second, 500, 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := Limits{Requests: 100, Tokens: 10000, Concurrency: 1}
			tn := NewTenant(l, w, ttl)
			tk, d := tn.Admit(t0, tc.reserve)
			if !d.Allowed {
				t.Fatal("refused")
			}
			for _, r := range tc.reloads {
				tn.Rebucket(t0+int64(r.after), r.window, r.slots)
			}
			at := t0 + int64(tc.finish)
			if _, d := tn.Admit(at, 1); d.Allowed || d.Limited != Concurrency {
				t.Fatalf("the slot taken before the reload is not counted after it: %+v", d)
			}
			expired := tc.finish > tc.reloads[len(tc.reloads)-1].window+time.Second
			want := tc.reserve
			if u := tn.Usage(at); expired {
				want = 0
				if u.Tokens != 0 {
					t.Fatalf("the reservation outlived the new window: %+v", u)
				}
			} else if u.Tokens != tc.reserve {
				t.Fatalf("the reservation is not counted after the reload: %+v", u)
			}
			tn.Finish(at, &tk, tc.actual)
			switch {
			case !expired:
				want = tc.actual
			case tc.actual > tc.reserve:
				want = tc.actual - tc.reserve
			}
			wantRequests := int64(1)
			if expired {
				wantRequests = 0
			}
			u := tn.Usage(at)
			if u.InFlight != 0 || u.Tokens != want || u.Requests != wantRequests {
				t.Fatalf("after the finish: %+v, want no slot, %d tokens, %d requests", u, want, wantRequests)
			}
			tn.Finish(at, &tk, tc.actual)
			tn.Release(at, &tk)
			if u2 := tn.Usage(at); u2 != u {
				t.Fatalf("a second finish changed the windows: %+v, was %+v", u2, u)
			}
			if _, d := tn.Admit(at, 1); !d.Allowed {
				t.Fatalf("the freed slot does not admit: %+v", d)
			}
		})
	}
}

// Settle and Release apart, across a rebucket each.
func TestRebucketSettleThenRelease(t *testing.T) {
	tn := NewTenant(Limits{Tokens: 10000, Concurrency: 2}, 10*time.Second, time.Minute)
	a, _ := tn.Admit(t0, 1000)
	b, _ := tn.Admit(t0+1, 50)
	tn.Rebucket(t0+int64(time.Second), 25*time.Second, 2*time.Minute)
	tn.Settle(t0+int64(2*time.Second), &a, 400)
	if u := tn.Usage(t0 + int64(2*time.Second)); u.Tokens != 450 || u.InFlight != 2 {
		t.Fatalf("after the credit: %+v", u)
	}
	tn.Rebucket(t0+int64(3*time.Second), 4*time.Second, 20*time.Second)
	tn.Settle(t0+int64(3500*time.Millisecond), &b, 450)
	tn.Release(t0+int64(3500*time.Millisecond), &a)
	if u := tn.Usage(t0 + int64(3500*time.Millisecond)); u.Tokens != 850 || u.InFlight != 1 {
		t.Fatalf("after the debit and a release: %+v", u)
	}
	tn.Release(t0+int64(3600*time.Millisecond), &a) // once only
	if u := tn.Usage(t0 + int64(3600*time.Millisecond)); u.InFlight != 1 {
		t.Fatalf("a second release freed another call's slot: %+v", u)
	}
	tn.Finish(t0+int64(3700*time.Millisecond), &b, 450)
	if u := tn.Usage(t0 + int64(3700*time.Millisecond)); u.InFlight != 0 || u.Tokens != 850 {
		t.Fatalf("after the last finish: %+v", u)
	}
}

// A call finishing after the tenant was handed over reports its delta in the
// buckets of the current windows, which the new owner (same settings) holds.
func TestRebucketHandedOverDelta(t *testing.T) {
	l := Limits{Requests: 10, Tokens: 1000, Concurrency: 1}
	tn := NewTenant(l, 10*time.Second, time.Minute)
	tk, _ := tn.Admit(t0, 500)
	tn.Rebucket(t0+int64(time.Second), 30*time.Second, 5*time.Minute)
	owner := NewTenant(l, 30*time.Second, 5*time.Minute)
	owner.Import(t0+int64(2*time.Second), tn.Export(t0+int64(2*time.Second)))
	tn.mu.Lock()
	tn.frozen = true // what Freeze does to the windows' authority
	tn.mu.Unlock()
	d, handed := tn.FinishOrHand(t0+int64(3*time.Second), &tk, 100)
	if !handed {
		t.Fatal("not handed over")
	}
	owner.Apply(t0+int64(3*time.Second), d)
	if u := owner.Usage(t0 + int64(3*time.Second)); u.InFlight != 0 || u.Tokens != 100 || u.Requests != 1 {
		t.Fatalf("new owner after the delta: %+v", u)
	}
}

// A ticket older than the history is settled as if its buckets had left the
// window: it never frees a slot another call holds.
func TestRebucketTicketBeyondHistory(t *testing.T) {
	tn := NewTenant(Limits{Tokens: 10000, Concurrency: 2}, 10*time.Second, time.Hour)
	old, _ := tn.Admit(t0, 100)
	now := t0
	for i := 0; i <= maxRebuckets; i++ {
		now += int64(time.Millisecond)
		tn.Rebucket(now, time.Duration(11-i%2)*time.Second, time.Duration(61-i%2)*time.Minute)
	}
	other, _ := tn.Admit(now, 100)
	tn.Finish(now, &old, 0)
	if u := tn.Usage(now); u.InFlight != 2 || u.Tokens != 200 {
		t.Fatalf("a ticket beyond the history changed the windows: %+v", u)
	}
	tn.Finish(now, &other, 0)
	if u := tn.Usage(now); u.InFlight != 1 || u.Tokens != 100 {
		t.Fatalf("a current ticket: %+v", u)
	}
}

// The same widths change nothing, and tickets stay as they were.
func TestRebucketSameWidthsIsNoOp(t *testing.T) {
	tn := NewTenant(Limits{Requests: 10, Concurrency: 1}, 10*time.Second, time.Minute)
	tk, _ := tn.Admit(t0, 0)
	before := tn.Export(t0 + 1)
	tn.Rebucket(t0+1, 10*time.Second, time.Minute)
	if after := tn.Export(t0 + 1); fmt.Sprint(after) != fmt.Sprint(before) || tn.history.gen != 0 {
		t.Fatalf("a rebucket to the same widths changed the state: %+v, was %+v", after, before)
	}
	tn.Finish(t0+2, &tk, 0)
	if u := tn.Usage(t0 + 2); u.InFlight != 0 {
		t.Fatalf("slot not freed: %+v", u)
	}
}

// A call admitted on an edge's fallback share (its ticket a share's, so
// FinishDelta and DeltaOf name its buckets in the width it was admitted
// under) spans a reload that changes the window and the slot TTL; the owner
// applies its deltas in the buckets their content was moved to. Found by a
// reviewer: the owner applied the old width's indexes as they were, and
// after the edge's only call ended, settled at 100 tokens, it counted 1 in
// flight and 4000 tokens, and refused a minute later at concurrency 1 (the
// slot freed only at slot_ttl, the credit lost).
func TestRebucketFallbackDeltaLandsOnItsCall(t *testing.T) {
	cases := []struct {
		name        string
		w1, w2      time.Duration
		ttl1, ttl2  time.Duration
		edgeReloads bool // the reload reaches the edge too before the call ends (else only the owner, yet)
		reportLate  bool // the admission reaches the owner after the reload
	}{
		{"longer window, shorter slot TTL", time.Minute, 2 * time.Minute, 10 * time.Minute, 5 * time.Minute, true, false},
		{"shorter window, longer slot TTL", 2 * time.Minute, time.Minute, 5 * time.Minute, 10 * time.Minute, true, false},
		{"the reload reaches the owner only", time.Minute, 2 * time.Minute, 10 * time.Minute, 5 * time.Minute, false, false},
		{"admission reported after the reload", time.Minute, 2 * time.Minute, 10 * time.Minute, 5 * time.Minute, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := Limits{Tokens: 10000, Concurrency: 1}
			owner := NewTenant(l, tc.w1, tc.ttl1)
			share := NewTenant(Limits{Tokens: 5000, Concurrency: 1}, tc.w1, tc.ttl1)
			tk, d := share.Admit(t0, 4000)
			if !d.Allowed {
				t.Fatal("share refused")
			}
			admission := DeltaOf(&tk)
			if !tc.reportLate {
				owner.ApplyFrom(t0, "edge", admission)
			}
			reload := t0 + int64(time.Second)
			owner.Rebucket(reload, tc.w2, tc.ttl2)
			if tc.edgeReloads {
				share.Rebucket(reload, tc.w2, tc.ttl2)
			}
			if tc.reportLate {
				owner.ApplyFrom(reload, "edge", admission)
			}
			end := t0 + int64(2*time.Second)
			fd := FinishDelta(&tk, 100)
			share.Finish(end, &tk, 100)
			owner.ApplyFrom(end, "edge", fd)
			u := owner.Usage(end)
			_, dec := owner.Admit(end+int64(time.Minute), 1)
			if u.InFlight != 0 || u.Tokens != 100 || !dec.Allowed {
				t.Fatalf("after the edge's only call ended, settled at 100 tokens: owner counts %d in flight, %d tokens; a minute later it decides %v (%v)",
					u.InFlight, u.Tokens, dec.Allowed, dec.Limited)
			}
		})
	}
}
