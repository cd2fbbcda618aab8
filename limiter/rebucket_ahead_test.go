package limiter

import (
	"testing"
	"time"

	"github.com/ringgate/ringgate/internal/knownlimit"
)

// A known limit (docs/limits.md), found by a reviewer; run with
// RINGGATE_KNOWN_LIMITS=1. A peer whose clock is 10 ms ahead (far less than one bucket of
// either width) names bucket H+1 while this node B's clock is still in H:
// catchUp rolls B's windows to H+1. A reload that shortens the window
// (1 h -> 45 s) lands in those few ms: remapTo sees now < head·width, takes
// it as a clock stepped back and uses the END of bucket H+1 (~28 s ahead of
// B's clock) as the time. Every charge mapped below that far-ahead head
// minus the window is dropped, among them B's own charges made 28 s before
// by B's clock, which a 45 s window must still count. All counted on B's
// clock (the peer's request at B-time tb).
func TestKnownLimitRebucketRightAfterCatchUpDropsLiveCharges(t *testing.T) {
	knownlimit.Only(t)
	const oldWindow, newWindow, ttl = time.Hour, 45 * time.Second, 10 * time.Minute
	l := Limits{Requests: 10}
	w1 := int64(oldWindow) / Buckets
	H := t0/w1 + 10
	const skew = int64(10 * time.Millisecond)
	tc := H*w1 - 1                             // B's own 9 requests: last ns of bucket H-1
	tb := (H+1)*w1 - int64(5*time.Millisecond) // B's clock: still bucket H
	tA := tb + skew                            // A's clock: bucket H+1
	for _, peer := range []bool{false, true} {
		name := "no peer delta"
		if peer {
			name = "peer 10ms ahead"
		}
		t.Run(name, func(t *testing.T) {
			b := NewTenant(l, oldWindow, ttl)
			for range 9 {
				if _, d := b.Admit(tc, 0); !d.Allowed {
					t.Fatal("refused")
				}
			}
			a := NewTenant(l, oldWindow, ttl) // A's fallback share
			tk := a.Tally(tA, 0)
			if peer {
				b.ApplyFrom(tb, "A", DeltaOf(&tk))
			} else {
				b.Admit(tb, 0) // the same request, admitted here
			}
			b.Rebucket(tb+1, newWindow, ttl)
			admitted := 0
			for range 10 {
				if _, d := b.Admit(tb+2, 0); d.Allowed {
					admitted++
				}
			}
			if total := 10 + admitted; total > int(l.Requests) {
				t.Fatalf("B admitted %d requests within %v by its clock (9 at tc, 1 at tb, %d at tb+2, tb-tc=%v); limit %d per %v",
					total, time.Duration(tb+2-tc), admitted, time.Duration(tb-tc), l.Requests, newWindow)
			}
		})
	}
}
