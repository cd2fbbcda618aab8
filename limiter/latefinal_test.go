package limiter

import (
	"testing"
	"time"
)

// The previous owner a writes its final snapshot with its calls running;
// they end, and their releases reach the new owner (ApplyFrom) before its
// late-final watcher (polling every 20 ms) applies the final with Replace.
// Replace starts a's slots from the final and applies a's deltas since
// the Import again. Found by a reviewer in the first version of Replace
// for Away: the release went to the stale account (or, for a call started
// after it, nowhere: no window for a yet), Replace clamped at zero and
// put the call's slot back, held until slot_ttl.
func TestReleaseBeforeLateFinalFreesSlot(t *testing.T) {
	l := Limits{Concurrency: 2}
	cases := []struct {
		name          string
		before, after int // a's calls in the stale snapshot; started after it
	}{
		{"call in the stale and the final", 1, 0},
		{"call started after the stale", 0, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prev := NewTenant(l, time.Minute, time.Hour)
			var tks []Ticket
			for range tc.before {
				tk, _ := prev.Admit(t0, 0)
				tks = append(tks, tk)
			}
			stale := prev.Export(t0)
			stale.Holder = "a"
			for range tc.after {
				tk, _ := prev.Admit(t0+1, 0)
				tks = append(tks, tk)
			}
			final := prev.Freeze(t0+2, "c")
			final.Holder = "a"

			owner := NewTenant(l, time.Minute, time.Hour)
			owner.Import(t0+3, stale.As("c"))
			base := owner.Export(t0 + 3)
			// a's calls end; their releases reach c first.
			for i := range tks {
				d, handed := prev.FinishOrHand(t0+4, &tks[i], 0)
				if !handed {
					t.Fatal("not handed")
				}
				owner.ApplyFrom(t0+4, "a", d)
			}
			// Then the late final.
			owner.Replace(t0+5, base, final.As("c"))
			if u := owner.Usage(t0 + 5); u.InFlight != 0 {
				t.Errorf("%d slots held after every call of a ended (concurrency %d): until slot_ttl", u.InFlight, l.Concurrency)
			}
		})
	}
}

// A previous owner that left the view (drained and gone) had its slots
// dropped (DropNode, router Release/dropGoneSlots); its late final must
// not put them back: no membership change is coming to drop them again.
func TestLateFinalKeepsGoneNodeDropped(t *testing.T) {
	l := Limits{Concurrency: 2}
	prev := NewTenant(l, time.Minute, time.Hour)
	prev.Admit(t0, 0)
	stale := prev.Export(t0)
	stale.Holder = "a"
	prev.Admit(t0+1, 0)
	final := prev.Freeze(t0+2, "c")
	final.Holder = "a"

	owner := NewTenant(l, time.Minute, time.Hour)
	owner.Import(t0+3, stale.As("c"))
	base := owner.Export(t0 + 3)
	owner.DropNode(t0+4, "a") // a is gone
	owner.Replace(t0+5, base, final.As("c"))
	if u := owner.Usage(t0 + 5); u.InFlight != 0 {
		t.Errorf("%d slots of a node that is gone counted again after its late final", u.InFlight)
	}
}

// The same for the new owner's own calls listed in the previous owner's
// accounts (Away[self], brought home by As): its calls on its fallback
// share that it reported to the previous owner, ended by delta, and calls
// it admitted as the owner before that one, ended by ticket. Found by a
// reviewer: Replace swapped the own slots bucket by bucket, so a release
// applied between the Import and the late final was undone (the emptied
// bucket cannot lose the stale account's slot again, and gains the
// final's): a minute after the final the new owner counted the call that
// had ended, until slot_ttl (the reviewer's case: 1 in flight with none
// running, concurrency 1 refused; here 2 with one running, concurrency 2
// refused, in each case). A call admitted since the Import, still
// running, keeps its slot.
func TestOwnReleaseBeforeLateFinalFreesSlot(t *testing.T) {
	const window, ttl = time.Minute, 10 * time.Minute
	l := Limits{Concurrency: 2}
	cases := []struct {
		name string
		// byTicket: b admitted the call as the owner before a took the
		// tenant over, and ends it by its ticket; otherwise b admitted it
		// on its fallback share, reported it to a and ends it by delta.
		byTicket   bool
		afterStale bool // reported to a after a's stale account
	}{
		{"fallback call in the stale and the final", false, false},
		{"fallback call reported after the stale", false, true},
		{"call admitted as the owner before the handoff", true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := NewTenant(l, window, ttl)
			b := NewTenant(l, window, ttl)
			share := NewTenant(Limits{Concurrency: 1}, window, ttl) // b's fallback share
			var call Ticket
			var stale State
			if tc.byTicket {
				call, _ = b.Admit(t0, 0)
				st := b.Freeze(t0, "a")
				st.Holder = "b"
				a.Import(t0, st.As("a"))
				stale = a.Export(t0 + 1)
			} else {
				b.Freeze(t0, "a")
				if tc.afterStale {
					stale = a.Export(t0)
				}
				call, _ = share.Admit(t0, 0)
				a.ApplyFrom(t0, "b", DeltaOf(&call))
				if !tc.afterStale {
					stale = a.Export(t0 + 1)
				}
			}
			stale.Holder = "a"
			final := a.Freeze(t0+2, "b")
			final.Holder = "a"

			now := t0 + int64(time.Second)
			b.Import(now, stale.As("b"))
			base := b.Export(now)
			// A call b admits a slot bucket later (not in the bucket the
			// release lands in) runs throughout.
			now += int64(ttl) / Buckets
			if _, d := b.Admit(now, 0); !d.Allowed {
				t.Fatalf("b refused its own call: %+v", d)
			}
			// The call ends; b (the owner) applies its end.
			now += int64(time.Second)
			if tc.byTicket {
				b.Finish(now, &call, 0)
			} else {
				fd := FinishDelta(&call, 0)
				share.Finish(now, &call, 0)
				b.Apply(now, fd)
			}
			// The late final arrives.
			now += int64(time.Second)
			b.Replace(now, base, final.As("b"))
			later := now + int64(time.Minute)
			if u, d := b.Usage(later), b.Check(later, 0); u.InFlight != 1 || !d.Allowed {
				t.Fatalf("one call runs, yet a minute after the late final b counts %d in flight and decides %v (%v)",
					u.InFlight, d.Allowed, d.Limited)
			}
		})
	}
}
