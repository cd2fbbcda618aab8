package limiter

import (
	"math/rand"
	"testing"
	"time"
)

// A state handed to another tenant value continues the windows exactly: the
// same arrivals get the same decisions on both.
func TestExportImportContinuesExactly(t *testing.T) {
	const window = 10 * time.Second
	l := Limits{Requests: 40, Tokens: 4000, Concurrency: 5}
	a := NewTenant(l, window, time.Minute)
	rng := rand.New(rand.NewSource(3))
	now := t0
	var held []Ticket
	for i := 0; i < 300; i++ {
		now += rng.Int63n(int64(window) / 20)
		if tk, d := a.Admit(now, 1+rng.Int63n(200)); d.Allowed {
			held = append(held, tk)
		}
		if len(held) > 3 {
			a.Finish(now, &held[0], 50)
			held = held[1:]
		}
	}
	b := NewTenant(l, window, time.Minute)
	b.Import(now, a.Export(now))
	if ua, ub := a.Usage(now), b.Usage(now); ua != ub {
		t.Fatalf("usage after import: %+v, want %+v", ub, ua)
	}
	for i := 0; i < 300; i++ {
		now += rng.Int63n(int64(window) / 20)
		cost := 1 + rng.Int63n(200)
		_, da := a.Admit(now, cost)
		_, db := b.Admit(now, cost)
		if da != db {
			t.Fatalf("arrival %d: original %+v, imported %+v", i, da, db)
		}
	}
}

// Deltas reported by the previous owner land in the buckets they were
// charged in: a release frees the handed-over slot, a credit the tokens.
func TestApplyDeltaFromPreviousOwner(t *testing.T) {
	l := Limits{Requests: 10, Tokens: 1000, Concurrency: 1}
	old := NewTenant(l, time.Minute, time.Hour)
	tk, d := old.Admit(t0, 500)
	if !d.Allowed {
		t.Fatal("refused")
	}
	owner := NewTenant(l, time.Minute, time.Hour)
	owner.Import(t0+1, old.Export(t0+1))
	if _, d := owner.Admit(t0+2, 1); d.Allowed || d.Limited != Concurrency {
		t.Fatalf("handed-over slot not counted: %+v", d)
	}
	owner.Apply(t0+3, FinishDelta(&tk, 200))
	u := owner.Usage(t0 + 3)
	if u.InFlight != 0 || u.Tokens != 200 || u.Requests != 1 {
		t.Fatalf("after the previous owner's finish: %+v", u)
	}
	late := NewTenant(l, time.Minute, time.Hour)
	tk2, _ := late.Admit(t0+4, 300)
	owner.Apply(t0+5, DeltaOf(&tk2))
	if u := owner.Usage(t0 + 5); u.Requests != 2 || u.Tokens != 500 || u.InFlight != 1 {
		t.Fatalf("after a late admission report: %+v", u)
	}
}

// The gap since a stale snapshot is charged at the peak rate, bucket by
// bucket, and never past the limit.
func TestChargeGapAtPeakRate(t *testing.T) {
	const window = 128 * time.Second // one-second buckets
	l := Limits{Requests: 100, Tokens: 1 << 40}
	a := NewTenant(l, window, time.Minute)
	now := t0 - t0%int64(time.Second)
	for i := 0; i < 3; i++ { // peak: 3 requests in one bucket
		a.Admit(now, 1)
	}
	a.Admit(now+int64(time.Second), 1)
	snap := a.Export(now + int64(time.Second))

	b := NewTenant(l, window, time.Minute)
	later := now + 11*int64(time.Second) // 10 buckets after the snapshot's head
	b.Import(later, snap)
	reqs, _ := b.ChargeGap(later, snap)
	if reqs != 30 {
		t.Fatalf("gap of 10 buckets at peak 3: charged %d, want 30", reqs)
	}
	if u := b.Usage(later); u.Requests != 34 {
		t.Fatalf("usage %d, want 34", u.Requests)
	}
	c := NewTenant(Limits{Requests: 10}, window, time.Minute)
	c.Import(later, snap)
	if reqs, _ := c.ChargeGap(later, snap); reqs != 6 {
		t.Fatalf("charged %d past a limit of 10 with 4 used, want 6", reqs)
	}
}

// A late final snapshot replaces the stale one and the gap estimate, and
// keeps what the new owner admitted in between.
func TestReplaceStaleWithFinal(t *testing.T) {
	l := Limits{Requests: 100}
	old := NewTenant(l, time.Minute, time.Hour)
	now := t0
	for i := 0; i < 5; i++ {
		old.Admit(now, 1)
	}
	stale := old.Export(now)
	for i := 0; i < 7; i++ { // admitted by the old owner after the stale snapshot
		old.Admit(now+int64(time.Second), 1)
	}
	final := old.Export(now + int64(time.Second))

	owner := NewTenant(l, time.Minute, time.Hour)
	at := now + 3*int64(time.Second)
	owner.Import(at, stale)
	owner.ChargeGap(at, stale)
	base := owner.Export(at)
	for i := 0; i < 2; i++ { // the new owner's own admissions
		owner.Admit(at, 1)
	}
	owner.Replace(at, base, final)
	if u := owner.Usage(at); u.Requests != 12+2 {
		t.Fatalf("after the final snapshot: %d requests, want 14", u.Requests)
	}
}

func TestShareRoundsUp(t *testing.T) {
	s := State{Requests: WindowState{Width: 1, Head: 9, Buckets: []Bucket{{Index: 3, Value: 7}, {Index: 9, Value: 1}}}}
	cases := []struct {
		n    int64
		want []int64
	}{{1, []int64{7, 1}}, {2, []int64{4, 1}}, {3, []int64{3, 1}}, {8, []int64{1, 1}}}
	for _, tc := range cases {
		got := s.Share(tc.n).Requests.Buckets
		if len(got) != 2 || got[0].Value != tc.want[0] || got[1].Value != tc.want[1] || got[0].Index != 3 {
			t.Errorf("Share(%d) = %+v, want values %v", tc.n, got, tc.want)
		}
	}
	if s.Requests.Buckets[0].Value != 7 {
		t.Error("Share changed its receiver")
	}
}

// After Freeze, a call admitted before it finishes as a delta for the new
// owner and changes nothing here, and nothing more is admitted here: the
// decision is the new owner's (Moved).
func TestFreezeHandsFinishesOver(t *testing.T) {
	tn := NewTenant(Limits{Requests: 10, Tokens: 1000, Concurrency: 2}, time.Minute, time.Hour)
	before, _ := tn.Admit(t0, 300)
	final := tn.Freeze(t0+1, "n2")
	if tn.MovedTo() != "n2" {
		t.Fatalf("MovedTo = %q after Freeze, want n2", tn.MovedTo())
	}
	if tk, d := tn.Admit(t0+2, 100); d.Allowed || !d.Moved || tk.admitted {
		t.Fatalf("a frozen tenant admitted: %+v", d)
	}
	d, handed := tn.FinishOrHand(t0+3, &before, 120)
	if !handed || d.Tokens != -180 || d.Slots != -1 {
		t.Fatalf("finish after freeze: %+v handed=%v", d, handed)
	}
	if u := tn.Usage(t0 + 3); u.Tokens != 300 || u.InFlight != 1 {
		t.Fatalf("a handed-over finish changed the frozen windows: %+v", u)
	}
	owner := NewTenant(Limits{Requests: 10, Tokens: 1000, Concurrency: 2}, time.Minute, time.Hour)
	owner.Import(t0+4, final)
	owner.Apply(t0+4, d)
	if u := owner.Usage(t0 + 4); u.Tokens != 120 || u.InFlight != 0 || u.Requests != 1 {
		t.Fatalf("new owner after the deltas: %+v", u)
	}
	tn.Import(t0+5, owner.Export(t0+5))
	if tn.MovedTo() != "" {
		t.Fatal("a tenant taken back still names where it went")
	}
	after, dec := tn.Admit(t0+6, 100)
	if !dec.Allowed {
		t.Fatalf("a tenant taken back does not admit: %+v", dec)
	}
	if _, handed := tn.FinishOrHand(t0+6, &after, 100); handed {
		t.Fatal("a tenant taken back is still frozen")
	}
}

// Restrict leaves 1/n of the limits for one window, then the whole limit.
func TestRestrict(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		used, n, wantCharged int64
	}{
		{"empty, 4 members", 0, 4, 75},
		{"already past the budget", 90, 4, 0},
		{"partly used", 50, 4, 25},
		{"one member", 0, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := NewTenant(Limits{Requests: 100}, time.Minute, time.Hour)
			for range tc.used {
				tn.Admit(t0, 0)
			}
			if got, _ := tn.Restrict(t0, tc.n); got != tc.wantCharged {
				t.Fatalf("charged %d, want %d", got, tc.wantCharged)
			}
			admitted := int64(0)
			for range 200 {
				if _, d := tn.Admit(t0+1, 0); d.Allowed {
					admitted++
				}
			}
			if want := min(100-tc.used, 100/tc.n); tc.n > 1 && admitted != want {
				t.Fatalf("admitted %d after Restrict, want %d", admitted, want)
			}
			if u := tn.Usage(t0 + int64(2*time.Minute)); u.Requests != 0 {
				t.Fatalf("the charge outlived the window: %+v", u)
			}
		})
	}
}

// A writer whose clock runs ahead: its newest bucket is counted now, not
// dropped.
func TestImportFutureBucketsCountNow(t *testing.T) {
	w := NewTenant(Limits{Requests: 10}, time.Minute, time.Hour)
	w.Admit(t0+int64(time.Second), 1)
	r := NewTenant(Limits{Requests: 10}, time.Minute, time.Hour)
	r.Import(t0, w.Export(t0+int64(time.Second)))
	if u := r.Usage(t0); u.Requests != 1 {
		t.Fatalf("a future bucket was dropped: %+v", u)
	}
}

// A sealed tenant decides nothing, but what was admitted before and what is
// reported from elsewhere still counts here, so Unseal continues exactly.
func TestSealKeepsCounting(t *testing.T) {
	tn := NewTenant(Limits{Requests: 10, Tokens: 1000, Concurrency: 2}, time.Minute, time.Hour)
	before, _ := tn.Admit(t0, 300)
	s := tn.Seal(t0 + 1)
	if s.Requests.Buckets[0].Value != 1 || s.Tokens.Buckets[0].Value != 300 || s.Slots.Buckets[0].Value != 1 {
		t.Fatalf("Seal's state = %+v", s)
	}
	if tk, d := tn.Admit(t0+2, 100); d.Allowed || !d.Moved || tk.admitted || tn.MovedTo() != "" {
		t.Fatalf("a sealed tenant admitted: %+v (moved to %q)", d, tn.MovedTo())
	}
	if _, handed := tn.FinishOrHand(t0+3, &before, 120); handed {
		t.Fatal("a sealed tenant handed a finish over")
	}
	other := NewTenant(Limits{}, time.Minute, time.Hour)
	tk, _ := other.Admit(t0+3, 200)
	tn.ApplyFrom(t0+3, "n2", DeltaOf(&tk))
	if u := tn.Usage(t0 + 3); u.Requests != 2 || u.Tokens != 320 || u.InFlight != 1 {
		t.Fatalf("sealed windows after a finish and a delta: %+v", u)
	}
	tn.Unseal()
	if tn.Sealed() {
		t.Fatal("still sealed")
	}
	if _, d := tn.Admit(t0+4, 100); !d.Allowed || d.RemainingRequests != 7 {
		t.Fatalf("after Unseal: %+v", d)
	}
	tn.Seal(t0 + 5)
	tn.Import(t0+6, tn.Export(t0+6))
	if tn.Sealed() {
		t.Fatal("Import leaves the tenant sealed")
	}
}

// TestOnChangeFiresOncePerArming: the hook fires at the first change after
// the tenant was made or found empty, for every kind of change, and not
// again until ExportOrArm finds it empty.
func TestOnChangeFiresOncePerArming(t *testing.T) {
	const sec = int64(time.Second)
	changes := []struct {
		name   string
		change func(tn *Tenant, now int64)
	}{
		{"admit", func(tn *Tenant, now int64) { tn.Admit(now, 5) }},
		{"import", func(tn *Tenant, now int64) {
			src := NewTenant(Limits{Requests: 10}, time.Minute, time.Minute)
			tk, _ := src.Admit(now, 1)
			src.Finish(now, &tk, 1)
			tn.Import(now, src.Export(now))
		}},
		{"apply", func(tn *Tenant, now int64) { tn.Apply(now, Delta{Bucket: now / tn.requests.width, Requests: 1}) }},
		{"charge at", func(tn *Tenant, now int64) { tn.ChargeAt(now, now, 1, 10) }},
		{"restrict", func(tn *Tenant, now int64) { tn.Restrict(now, 3) }},
	}
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			tn := NewTenant(Limits{Requests: 10, Tokens: 1000, Concurrency: 5}, time.Minute, time.Minute)
			fired := 0
			tn.OnChange(func() { fired++ })
			now := 100 * sec
			c.change(tn, now)
			c.change(tn, now)
			if fired != 1 {
				t.Fatalf("fired %d times for two changes, want once", fired)
			}
			if _, empty := tn.ExportOrArm(now); empty {
				t.Fatal("found empty right after a change")
			}
			c.change(tn, now)
			if fired != 1 {
				t.Fatalf("re-armed by an export that was not empty: fired %d", fired)
			}
			later := now + int64(3*time.Minute) // past window and slot TTL
			if _, empty := tn.ExportOrArm(later); !empty {
				t.Fatal("not empty after the window")
			}
			c.change(tn, later)
			if fired != 2 {
				t.Fatalf("fired %d times after re-arming, want 2", fired)
			}
		})
	}
	// A tenant already holding state counts as changed when the hook is set.
	tn := NewTenant(Limits{Requests: 10}, time.Minute, time.Minute)
	tn.Admit(100*sec, 0)
	fired := 0
	tn.OnChange(func() { fired++ })
	if fired != 1 {
		t.Errorf("hook set on a busy tenant fired %d times, want 1", fired)
	}
}
