package limiter

import (
	"testing"
	"time"

	"github.com/ringgate/ringgate/internal/knownlimit"
)

// A known limit (docs/limits.md), found by a reviewer: the new owner's own slots window (t.slots) mixes the calls it
// admits as owner (released by ticket) with its own calls reported by
// delta (from "": calls it admitted on its fallback share while A owned
// the tenant, router/fallback.go reportDelta -> applyOnce from ""). After
// a takeover from a stale snapshot (A killed; its final late or lost), a
// fallback call of B that A had been told of after the snapshot is not in
// B's windows. Its end, applied as a -1 slot delta on B's own window, is
// clamped to what that bucket holds: it takes away the slot of a call B
// admitted as owner, which is still running. B then admits past its
// concurrency limit (3 calls at once for 2). Run with
// RINGGATE_KNOWN_LIMITS=1.
func TestKnownLimitOwnReleaseErasesAnotherCallsSlot(t *testing.T) {
	knownlimit.Only(t)
	const window, ttl = time.Minute, 10 * time.Minute
	l := Limits{Concurrency: 2}
	a := NewTenant(l, window, ttl)
	share := NewTenant(Limits{Concurrency: 1}, window, ttl) // B's fallback share for A
	b := NewTenant(l, window, ttl)
	b.Freeze(t0, "A")

	stale := a.Export(t0) // A's last snapshot: nothing yet
	stale.Holder = "A"
	// B, cut off from A for a moment, admits c1 on its fallback share and
	// reports it; A counts it (away["B"]).
	c1, d := share.Admit(t0+int64(time.Second), 0)
	if !d.Allowed {
		t.Fatal("share refused")
	}
	a.ApplyFrom(t0+int64(time.Second), "B", DeltaOf(&c1))
	// A is killed. B takes over from the stale snapshot.
	now := t0 + int64(2*time.Second)
	b.Import(now, stale.As("B"))
	b.ChargeGap(now, stale)
	b.Restrict(now, 2)
	// B admits c2 as the owner.
	if _, d := b.Admit(now, 0); !d.Allowed {
		t.Fatalf("c2 refused: %+v", d)
	}
	// c1 ends on B; its end is reported to the owner, B itself.
	now += int64(time.Second)
	fd := FinishDelta(&c1, 0)
	share.Finish(now, &c1, 0)
	b.Apply(now, fd)
	// c2 still runs: one slot is free.
	running := 1
	for range 3 {
		if _, d := b.Admit(now, 0); d.Allowed {
			running++
		}
	}
	if running > int(l.Concurrency) {
		t.Fatalf("%d calls running on B (c2 and %d admitted after c1 ended), concurrency %d; B counts %d in flight",
			running, running-1, l.Concurrency, b.Usage(now).InFlight)
	}
}
