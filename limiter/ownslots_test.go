package limiter

import (
	"testing"
	"time"
)

// The new owner's own slots window (t.slots) holds the calls it admits as
// owner (released by ticket) and its own calls reported by delta (from "":
// calls it admitted on its fallback share while A owned the tenant,
// router/fallback.go reportDelta -> applyOnce from ""). After a takeover
// from a stale snapshot (A killed; its final late or lost), a fallback call
// of B that A had been told of after the snapshot is not in B's windows.
// Found by a reviewer: its end, applied as a -1 slot delta, took the slot
// of a call B had admitted as owner in the same bucket, still running, and
// B admitted past its concurrency (3 calls at once for 2). The end of a
// fallback call the snapshot did count still frees its slot, in that
// bucket too; a call B admitted before an earlier Import is the state's.
func TestOwnReleaseOfUncountedCallKeepsOwnersSlot(t *testing.T) {
	const window, ttl = time.Minute, 10 * time.Minute
	l := Limits{Concurrency: 2}
	cases := []struct {
		name string
		// counted: the fallback call was reported to A before its last
		// snapshot, which B imports.
		counted bool
		// running: calls that run on B after the fallback call ended,
		// B's own as owner (the fallback call's end must leave their
		// slots, and free its own if counted).
		running int
	}{
		{"uncounted call ends while the owner's runs", false, 1},
		{"counted call ends while the owner's runs", true, 1},
		{"uncounted call ends, owner's calls ended", false, 0},
		{"counted call ends, owner's calls ended", true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := NewTenant(l, window, ttl)
			share := NewTenant(Limits{Concurrency: 1}, window, ttl) // B's fallback share for A
			b := NewTenant(l, window, ttl)
			b.Freeze(t0, "A")

			var stale State
			if !tc.counted {
				stale = a.Export(t0) // A's last snapshot: nothing yet
			}
			// B, cut off from A for a moment, admits c1 on its fallback
			// share and reports it; A counts it (away["B"]).
			c1, d := share.Admit(t0+int64(time.Second), 0)
			if !d.Allowed {
				t.Fatal("share refused")
			}
			a.ApplyFrom(t0+int64(time.Second), "B", DeltaOf(&c1))
			if tc.counted {
				stale = a.Export(t0 + int64(time.Second))
			}
			stale.Holder = "A"
			// A is killed. B takes over from the snapshot.
			now := t0 + int64(2*time.Second)
			b.Import(now, stale.As("B"))
			b.ChargeGap(now, stale)
			b.Restrict(now, 2)
			// B admits its own calls as the owner, in c1's slot bucket.
			own := make([]Ticket, 0, 2)
			want := 2
			if tc.counted {
				want = 1 // c1 holds a slot
			}
			for range want {
				tk, d := b.Admit(now, 0)
				if !d.Allowed {
					t.Fatalf("B refused its own call: %+v", d)
				}
				own = append(own, tk)
			}
			for i := tc.running; i < len(own); i++ {
				b.Finish(now, &own[i], 0)
			}
			// c1 ends; its end is reported to the owner, B itself.
			now += int64(time.Second)
			fd := FinishDelta(&c1, 0)
			share.Finish(now, &c1, 0)
			b.Apply(now, fd)
			if got, want := b.Usage(now).InFlight, int64(min(tc.running, len(own))); got != want {
				t.Fatalf("B counts %d in flight, %d calls run", got, want)
			}
			admitted := 0
			for range 3 {
				if _, d := b.Admit(now, 0); d.Allowed {
					admitted++
				}
			}
			if got, want := min(tc.running, len(own))+admitted, int(l.Concurrency); got != want {
				t.Fatalf("%d calls running on B after c1 ended (%d admitted then), concurrency %d",
					got, admitted, l.Concurrency)
			}
		})
	}
}

// A call B admitted before an Import is the imported state's: its end by
// ticket does not count against the calls admitted since (Tenant.fresh),
// so the end of an uncounted fallback call still cannot take their slot.
func TestReleaseAcrossTwoImports(t *testing.T) {
	const window, ttl = time.Minute, 10 * time.Minute
	l := Limits{Concurrency: 3}
	b := NewTenant(l, window, ttl)
	share := NewTenant(Limits{Concurrency: 1}, window, ttl)
	now := t0
	b.Import(now, State{})
	old, _ := b.Admit(now, 0) // admitted under the first Import
	st := b.Freeze(now, "A")  // handed to A and back: A's account holds old
	st.Holder = "B"
	c1, _ := share.Admit(now, 0) // a fallback call A never hears of
	now += int64(time.Second)
	b.Import(now, st) // B's own again, old in its slots
	fresh, d := b.Admit(now, 0)
	if !d.Allowed {
		t.Fatalf("refused: %+v", d)
	}
	b.Finish(now, &old, 0) // old ends: its slot, not fresh's
	fd := FinishDelta(&c1, 0)
	share.Finish(now, &c1, 0)
	b.Apply(now, fd) // c1 ends: counted nowhere here, frees nothing
	if u := b.Usage(now); u.InFlight != 1 {
		t.Fatalf("%d in flight, 1 call (fresh) runs", u.InFlight)
	}
	b.Finish(now, &fresh, 0)
	if u := b.Usage(now); u.InFlight != 0 {
		t.Fatalf("%d in flight after every call ended", u.InFlight)
	}
}
