package limiter

import (
	"testing"
	"time"
)

// ownChanges was kept until Import + the request window, but a late final
// is accepted for lateFor = 2 s after the Import (handoff.awaitLateFinals),
// whatever the window (found by a reviewer). With the bench's 2 s
// window a final applied 2.1 s after the Import takes the bucket by bucket
// replace again: the release of b's own call made in between is undone and
// the slot is held until slot_ttl (the sequence of
// TestOwnReleaseBeforeLateFinalFreesSlot, "call admitted as the owner
// before the handoff", with window 2 s).
func TestOwnReleaseBeforeLateFinalShortWindow(t *testing.T) {
	const window, ttl = 2 * time.Second, 10 * time.Minute
	l := Limits{Concurrency: 1}
	a := NewTenant(l, window, ttl)
	b := NewTenant(l, window, ttl)
	call, _ := b.Admit(t0, 0)
	st := b.Freeze(t0, "a")
	st.Holder = "b"
	a.Import(t0, st.As("a"))
	stale := a.Export(t0 + 1)
	stale.Holder = "a"
	final := a.Freeze(t0+2, "b")
	final.Holder = "a"

	now := t0 + int64(100*time.Millisecond)
	b.Import(now, stale.As("b"))
	base := b.Export(now)
	imported := now
	now += int64(500 * time.Millisecond)
	b.Finish(now, &call, 0) // b's own call ends; b is the owner
	now = imported + int64(2100*time.Millisecond)
	b.Replace(now, base, final.As("b")) // the late final, within lateFor+poll
	later := now + int64(time.Minute)
	if u, d := b.Usage(later), b.Check(later, 0); u.InFlight != 0 || !d.Allowed {
		t.Fatalf("no call runs, yet a minute after the late final b counts %d in flight and decides %v (%v, retry %v)",
			u.InFlight, d.Allowed, d.Limited, d.RetryAfter)
	}
}
