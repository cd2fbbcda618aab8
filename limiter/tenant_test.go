package limiter

import (
	"math/rand"
	"sort"
	"testing"
	"time"
)

// t0 is a fixed wall-clock origin for fake clocks; buckets are absolute, so it
// matters only that it is positive and not bucket-aligned.
const t0 = int64(1_764_000_000_123_456_789)

type event struct {
	at      int64 // admission time
	tokens  int64 // final charge (after settlement)
	release int64 // when the slot is released; 0 = holder vanished
}

// audit checks, the way an auditor counting at the upstream would, that no
// trailing interval of length window ever held more than the limits, and that
// no more slots than allowed were held at any admission.
func audit(t *testing.T, evs []event, l Limits, window, ttl time.Duration) {
	t.Helper()
	sort.Slice(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	w := int64(window)
	lo := 0
	var tokens int64
	for i, e := range evs {
		tokens += e.tokens
		for evs[lo].at <= e.at-w {
			tokens -= evs[lo].tokens
			lo++
		}
		if n := int64(i - lo + 1); l.Requests > 0 && n > l.Requests {
			t.Fatalf("window ending %d: %d requests admitted, limit %d", e.at-t0, n, l.Requests)
		}
		if l.Tokens > 0 && tokens > l.Tokens {
			t.Fatalf("window ending %d: %d tokens admitted, limit %d", e.at-t0, tokens, l.Tokens)
		}
		if l.Concurrency > 0 {
			held := int64(0)
			for _, p := range evs[:i+1] {
				end := p.release
				if end == 0 || end > p.at+int64(ttl) {
					end = p.at + int64(ttl)
				}
				if p.at <= e.at && e.at < end {
					held++
				}
			}
			if held > l.Concurrency {
				t.Fatalf("at %d: %d slots held, limit %d", e.at-t0, held, l.Concurrency)
			}
		}
	}
}

type pending struct {
	at     int64
	tk     Ticket
	actual int64
	vanish bool
}

// simulate drives a tenant with n arrivals whose gaps come from gap, costs
// from cost, and holding times from hold; a holder vanishes (never releases)
// with probability vanish. Settlement only credits back (actual <= reserved)
// so the audit may count final charges.
func simulate(t *testing.T, rng *rand.Rand, l Limits, window, ttl time.Duration, n int,
	gap func() int64, cost func() int64, hold func() int64, vanish float64) (admitted []event, offered int) {
	t.Helper()
	tn := NewTenant(l, window, ttl)
	now := t0
	var open []pending
	var evs []event
	for i := 0; i < n; i++ {
		now += gap()
		// Settle everything due before this arrival, in time order.
		sort.Slice(open, func(a, b int) bool { return open[a].at < open[b].at })
		k := 0
		for ; k < len(open) && open[k].at <= now; k++ {
			p := &open[k]
			if p.vanish {
				tn.Settle(p.at, &p.tk, p.actual)
				continue
			}
			tn.Finish(p.at, &p.tk, p.actual)
		}
		open = open[k:]

		c := cost()
		tk, d := tn.Admit(now, c)
		offered++
		if !d.Allowed {
			if d.RetryAfter <= 0 {
				t.Fatalf("refused (%v) with no Retry-After", d.Limited)
			}
			continue
		}
		actual := c - rng.Int63n(c/2+1)
		h := hold()
		e := event{at: now, tokens: actual, release: now + h}
		v := rng.Float64() < vanish
		if v {
			e.release = 0
		}
		evs = append(evs, e)
		open = append(open, pending{at: now + h, tk: tk, actual: actual, vanish: v})
	}
	return evs, offered
}

func TestNoSlidingIntervalExceedsLimit(t *testing.T) {
	const window = 10 * time.Second
	w := int64(window)
	cases := []struct {
		name   string
		limits Limits
		gap    func(*rand.Rand) int64
		cost   func(*rand.Rand) int64
		hold   func(*rand.Rand) int64
		vanish float64
	}{
		{"requests poisson 3x", Limits{Requests: 50}, func(r *rand.Rand) int64 { return int64(r.ExpFloat64() * float64(w) / 150) },
			func(*rand.Rand) int64 { return 1 }, func(*rand.Rand) int64 { return 1 }, 0},
		{"limit 1", Limits{Requests: 1, Tokens: 1000}, func(r *rand.Rand) int64 { return r.Int63n(w / 4) },
			func(r *rand.Rand) int64 { return 1 + r.Int63n(500) }, func(*rand.Rand) int64 { return 1 }, 0},
		{"bursts at window edges", Limits{Requests: 100, Tokens: 5000}, func(r *rand.Rand) int64 {
			if r.Intn(100) == 0 {
				return w - r.Int63n(w/100) // jump to just before the next edge
			}
			return r.Int63n(1000)
		}, func(r *rand.Rand) int64 { return 1 + r.Int63n(100) }, func(*rand.Rand) int64 { return 1 }, 0},
		{"tokens bind, credits back", Limits{Tokens: 20000}, func(r *rand.Rand) int64 { return int64(r.ExpFloat64() * float64(w) / 400) },
			func(r *rand.Rand) int64 { return 10 + r.Int63n(200) }, func(r *rand.Rand) int64 { return r.Int63n(3 * w) }, 0},
		{"concurrency with vanishing holders", Limits{Requests: 1000, Concurrency: 5}, func(r *rand.Rand) int64 { return r.Int63n(w / 50) },
			func(*rand.Rand) int64 { return 1 }, func(r *rand.Rand) int64 { return r.Int63n(w / 2) }, 0.05},
		{"all three", Limits{Requests: 200, Tokens: 30000, Concurrency: 20}, func(r *rand.Rand) int64 { return int64(r.ExpFloat64() * float64(w) / 600) },
			func(r *rand.Rand) int64 { return 1 + r.Int63n(400) }, func(r *rand.Rand) int64 { return r.Int63n(w) }, 0.01},
		{"sparse, long gaps", Limits{Requests: 3, Tokens: 100}, func(r *rand.Rand) int64 { return r.Int63n(3 * w) },
			func(r *rand.Rand) int64 { return 1 + r.Int63n(60) }, func(*rand.Rand) int64 { return 1 }, 0},
	}
	for _, tc := range cases {
		for seed := int64(1); seed <= 5; seed++ {
			rng := rand.New(rand.NewSource(seed))
			evs, _ := simulate(t, rng, tc.limits, window, 30*time.Second, 4000,
				func() int64 { return tc.gap(rng) }, func() int64 { return tc.cost(rng) }, func() int64 { return tc.hold(rng) }, tc.vanish)
			if len(evs) == 0 {
				t.Fatalf("%s seed %d: nothing admitted", tc.name, seed)
			}
			t.Run(tc.name, func(t *testing.T) { audit(t, evs, tc.limits, window, 30*time.Second) })
		}
	}
}

// Under steady demand of twice the limit, at least 98 % of the limit is used.
func TestTwiceTheDemandUsesTheLimit(t *testing.T) {
	const window = 5 * time.Second
	const windows = 40
	w := int64(window)
	cases := []struct {
		name   string
		limits Limits
		cost   int64
		per    int64 // arrivals per window
	}{
		{"requests", Limits{Requests: 100}, 1, 200},
		{"requests large limit", Limits{Requests: 10000}, 1, 20000},
		{"tokens", Limits{Tokens: 50000}, 100, 1000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(7))
			n := int(tc.per * windows)
			evs, _ := simulate(t, rng, tc.limits, window, time.Minute, n,
				func() int64 { return int64(rng.ExpFloat64() * float64(w) / float64(tc.per)) },
				func() int64 { return tc.cost }, func() int64 { return 1 }, 0)
			audit(t, evs, tc.limits, window, time.Minute)
			// Average what the windows after the first (the burst that fills
			// it) held, the way an auditor sums actual usage.
			limit := tc.limits.Requests
			if limit <= 0 {
				limit = tc.limits.Tokens
			}
			var sum float64
			var count int
			for s := evs[0].at + w; s+w <= evs[len(evs)-1].at; s += w / 10 {
				var got int64
				first := sort.Search(len(evs), func(i int) bool { return evs[i].at >= s })
				for _, e := range evs[first:] {
					if e.at >= s+w {
						break
					}
					if tc.limits.Tokens > 0 {
						got += e.tokens
					} else {
						got++
					}
				}
				sum += float64(got) / float64(limit)
				count++
			}
			ratio := sum / float64(count)
			t.Logf("used %.2f%% of the limit under 2x demand", 100*ratio)
			if ratio < 0.98 {
				t.Fatalf("used %.2f%% of the limit, want >= 98%%", 100*ratio)
			}
		})
	}
}

func TestRetryAfterIsExact(t *testing.T) {
	const window = 10 * time.Second
	tn := NewTenant(Limits{Requests: 3, Tokens: 100}, window, time.Minute)
	now := t0
	for i := 0; i < 3; i++ {
		if _, d := tn.Admit(now, 10); !d.Allowed {
			t.Fatalf("admission %d refused", i)
		}
		now += int64(time.Second)
	}
	_, d := tn.Admit(now, 10)
	if d.Allowed || d.Limited != Requests || d.RetryAfter <= 0 {
		t.Fatalf("want a requests refusal with Retry-After, got %+v", d)
	}
	if _, d2 := tn.Admit(now+int64(d.RetryAfter)-1, 10); d2.Allowed {
		t.Fatalf("admitted 1ns before Retry-After %v", d.RetryAfter)
	}
	if _, d3 := tn.Admit(now+int64(d.RetryAfter), 10); !d3.Allowed {
		t.Fatalf("refused at Retry-After %v: %+v", d.RetryAfter, d3)
	}
	// The first charge stops counting no earlier than one window after it.
	if lower := t0 + int64(window); now+int64(d.RetryAfter) < lower {
		t.Fatalf("capacity freed at %d, before the window closed at %d", now+int64(d.RetryAfter), lower)
	}
}

func TestTooLargeNeverFits(t *testing.T) {
	tn := NewTenant(Limits{Tokens: 100}, time.Minute, time.Minute)
	_, d := tn.Admit(t0, 101)
	if d.Allowed || d.Limited != Tokens || !d.TooLarge {
		t.Fatalf("want too-large tokens refusal, got %+v", d)
	}
	if u := tn.Usage(t0); u.Requests != 0 || u.Tokens != 0 || u.InFlight != 0 {
		t.Fatalf("a refusal charged something: %+v", u)
	}
}

func TestSettleCreditsAndDebits(t *testing.T) {
	const window = 10 * time.Second
	cases := []struct {
		name       string
		reserve    int64
		actual     int64
		settleAt   int64
		wantTokens int64 // tokens counted just after settling
	}{
		{"credit back", 500, 150, int64(time.Second), 150},
		{"debit excess", 100, 300, int64(time.Second), 300},
		{"exact", 200, 200, int64(time.Second), 200},
		{"credit after the bucket expired is dropped", 500, 100, int64(window) * 2, 0},
		{"debit after the bucket expired is charged now", 100, 300, int64(window) * 2, 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tn := NewTenant(Limits{Tokens: 1000, Concurrency: 1}, window, time.Hour)
			tk, d := tn.Admit(t0, tc.reserve)
			if !d.Allowed {
				t.Fatal("refused")
			}
			tn.Finish(t0+tc.settleAt, &tk, tc.actual)
			if u := tn.Usage(t0 + tc.settleAt); u.Tokens != tc.wantTokens || u.InFlight != 0 {
				t.Fatalf("after settle: %+v, want tokens %d and no slot", u, tc.wantTokens)
			}
			tn.Finish(t0+tc.settleAt, &tk, tc.actual) // idempotent
			if u := tn.Usage(t0 + tc.settleAt); u.Tokens != tc.wantTokens || u.InFlight != 0 {
				t.Fatalf("second finish changed usage: %+v", u)
			}
		})
	}
}

func TestSlotsExpireAfterTTL(t *testing.T) {
	ttl := 10 * time.Second
	tn := NewTenant(Limits{Concurrency: 2}, time.Minute, ttl)
	for i := 0; i < 2; i++ {
		if _, d := tn.Admit(t0, 1); !d.Allowed {
			t.Fatal("refused")
		}
	}
	if _, d := tn.Admit(t0+int64(ttl)-1, 1); d.Allowed {
		t.Fatal("slot freed before its TTL")
	}
	if _, d := tn.Admit(t0+int64(ttl)+int64(ttl)/Buckets+1, 1); !d.Allowed {
		t.Fatalf("slot still held past its TTL: %+v", d)
	}
}

func TestClockStepBackIsSafe(t *testing.T) {
	tn := NewTenant(Limits{Requests: 2}, time.Second, time.Minute)
	tn.Admit(t0, 1)
	tn.Admit(t0-int64(time.Hour), 1)
	if _, d := tn.Admit(t0-int64(2*time.Hour), 1); d.Allowed {
		t.Fatal("a clock step back reopened the window")
	}
}

func TestHeaderValues(t *testing.T) {
	tn := NewTenant(Limits{Requests: 10, Tokens: 1000, Concurrency: 3}, time.Minute, time.Minute)
	_, d := tn.Admit(t0, 250)
	if d.LimitRequests != 10 || d.RemainingRequests != 9 || d.LimitTokens != 1000 || d.RemainingTokens != 750 || d.InFlight != 1 {
		t.Fatalf("header values: %+v", d)
	}
	if d.ResetRequests <= 59*time.Second || d.ResetRequests > time.Minute+time.Minute/Buckets {
		t.Fatalf("reset-requests %v, want about one window", d.ResetRequests)
	}
	un := NewTenant(Limits{}, time.Minute, time.Minute).Peek(t0)
	if un.RemainingRequests != -1 || un.RemainingTokens != -1 {
		t.Fatalf("unlimited remaining: %+v", un)
	}
}

func TestDecisionAllocatesNothing(t *testing.T) {
	tn := NewTenant(Limits{Requests: 1 << 40, Tokens: 1 << 50, Concurrency: 1 << 30}, time.Minute, time.Minute)
	now := t0
	allocs := testing.AllocsPerRun(1000, func() {
		now += 1000
		tk, _ := tn.Admit(now, 100)
		tn.Finish(now, &tk, 80)
	})
	if allocs != 0 {
		t.Fatalf("decision allocates %.1f per op", allocs)
	}
}

// Cancel leaves the windows as if the request had never been admitted.
func TestCancelTakesBackAdmission(t *testing.T) {
	lim := NewTenant(Limits{Requests: 2, Tokens: 100, Concurrency: 1}, time.Second, time.Minute)
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	tk, d := lim.Admit(now, 60)
	if !d.Allowed {
		t.Fatal("first admission refused")
	}
	if _, d := lim.Admit(now, 10); d.Allowed || d.Limited != Concurrency {
		t.Fatalf("second admission %+v, want refused on concurrency", d)
	}
	lim.Cancel(now+1, &tk)
	if u := lim.Usage(now + 1); u.Requests != 0 || u.Tokens != 0 || u.InFlight != 0 {
		t.Fatalf("after Cancel: %+v, want nothing", u)
	}
	lim.Cancel(now+1, &tk) // spent: nothing more
	lim.Finish(now+1, &tk, 5)
	if u := lim.Usage(now + 1); u.Requests != 0 || u.Tokens != 0 || u.InFlight != 0 {
		t.Fatalf("a spent ticket changed the windows: %+v", u)
	}
	if _, d := lim.Admit(now+2, 100); !d.Allowed {
		t.Fatalf("after Cancel the whole limit should be free: %+v", d)
	}
}

// A request cancelled after its tenant was handed over: the new owner,
// which imported the charge, takes it back with the delta.
func TestCancelAfterHandover(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	old := NewTenant(Limits{Requests: 5, Tokens: 1000, Concurrency: 1}, time.Second, time.Minute)
	tk, d := old.Admit(now, 100)
	if !d.Allowed {
		t.Fatal("refused")
	}
	st := old.Freeze(now, "n2")
	neu := NewTenant(Limits{Requests: 5, Tokens: 1000, Concurrency: 1}, time.Second, time.Minute)
	neu.Import(now, st)
	delta, handed := old.CancelOrHand(now+1, &tk)
	if !handed {
		t.Fatal("cancel on a frozen tenant applied here")
	}
	neu.Apply(now+1, delta)
	if u := neu.Usage(now + 1); u.Requests != 0 || u.Tokens != 0 || u.InFlight != 0 {
		t.Fatalf("new owner after the cancel delta: %+v, want nothing", u)
	}
}

// An idle tenant holds no buckets; a charge allocates a window's, and they
// go once everything in it has left the window.
func TestBucketsOnlyWhileCharged(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	lim := NewTenant(Limits{Requests: 5, Tokens: 1000, Concurrency: 2}, time.Second, time.Minute)
	held := func() (n int) {
		for _, w := range []*Window{&lim.requests, &lim.tokens, &lim.slots} {
			if w.held() {
				n++
			}
		}
		return n
	}
	if n := held(); n != 0 {
		t.Fatalf("a new tenant holds %d windows' buckets", n)
	}
	tk, _ := lim.Admit(now, 100)
	if n := held(); n != 3 {
		t.Fatalf("after an admission %d windows hold buckets, want 3", n)
	}
	lim.Finish(now, &tk, 80)
	lim.Usage(now + int64(2*time.Second)) // the requests and tokens left the window
	if lim.requests.held() || lim.tokens.held() {
		t.Error("an empty request or token window still holds its buckets")
	}
	if u := lim.Usage(now + int64(2*time.Second)); u.Requests != 0 || u.InFlight != 0 {
		t.Errorf("usage %+v after the window", u)
	}
	if _, d := lim.Admit(now+int64(2*time.Second), 1000); !d.Allowed {
		t.Errorf("a fresh window refused: %+v", d)
	}
}

// AdmitBeside keeps to what the shares of the members that cannot reach
// the owner leave of each limit, never less than a share's worth, even
// where a share rounds down to 0 (found by a reviewer: the owner's cut and
// the edges' shares both 0 once locked a small tenant out everywhere).
func TestAdmitBesideKeepsWhatTheSharesLeave(t *testing.T) {
	cases := []struct {
		name            string
		limits          Limits
		shares, members int64
		tokens          int64
		wantAdmits      int
		limited         Dimension
	}{
		{"requests, one of three shares", Limits{Requests: 30}, 1, 3, 1, 20, Requests},
		{"requests, two of three", Limits{Requests: 30}, 2, 3, 1, 10, Requests},
		{"tokens, one of two", Limits{Tokens: 100}, 1, 2, 10, 5, Tokens},
		{"concurrency 3, two of three", Limits{Concurrency: 3}, 2, 3, 0, 1, Concurrency},
		{"concurrency 1, one of two: the share is 0", Limits{Concurrency: 1}, 1, 2, 0, 1, Concurrency},
		{"concurrency 2, two of three: the shares are 0", Limits{Concurrency: 2}, 2, 3, 0, 2, Concurrency},
		{"no share", Limits{Requests: 30}, 0, 3, 1, 30, Requests},
		{"no limit stays none", Limits{}, 1, 3, 1, 100, None},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := NewTenant(tc.limits, time.Minute, time.Hour)
			got := 0
			var last Decision
			for range 100 {
				_, d := l.AdmitBeside(t0, tc.tokens, tc.shares, tc.members)
				if !d.Allowed {
					last = d
					break
				}
				got++
			}
			if got != tc.wantAdmits {
				t.Fatalf("admitted %d, want %d", got, tc.wantAdmits)
			}
			if last.Limited != tc.limited {
				t.Errorf("refused by %v, want %v", last.Limited, tc.limited)
			}
			if tc.limited != None && last.RetryAfter <= 0 {
				t.Errorf("refusal without a retry: %+v", last)
			}
		})
	}
}
