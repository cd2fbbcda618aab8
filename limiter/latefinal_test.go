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
