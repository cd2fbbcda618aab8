package lease

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringgate/ringgate/limiter"
)

// Without Redis, the share of a node started in a cluster is charged as
// used at its start, not when its share limiter is made (its first
// request): what the previous process (or the others at their larger
// shares) admitted was admitted before the start, and has left the
// provider's window one window after it. Charged at the first request, a
// node whose first request came late in its first window was locked out
// until a window after that request (5.95 s for a 3 s window), and a
// reload of limits.window within a window of the start charged the new
// budget again (a reviewer's).
func TestStorelessChargeLastsAWindowFromStart(t *testing.T) {
	const window = 3 * time.Second
	for _, tc := range []string{"late first request", "reload in first window"} {
		t.Run(tc, func(t *testing.T) {
			ctx := context.Background()
			born := int64(1000 * time.Hour)
			var at atomic.Int64 // the old budget's give-back reads it too
			at.Store(born)
			now := born
			clock := at.Load
			l := NewLeaser(LeaserConfig{Node: "a", Clock: clock}) // no store
			members := func() int { return 2 }
			cfg := Config{Key: "storeless-start", Limits: limiter.Limits{Requests: 300}, Window: window}
			b := l.Budget(cfg, members)
			switch tc {
			case "late first request":
				now = born + int64(window) - int64(100*time.Millisecond)
				at.Store(now)
				l.Maintain(ctx)
				b.Take(now, 1) // its first request: the share is made and charged now
			case "reload in first window":
				now = born + int64(100*time.Millisecond)
				at.Store(now)
				l.Maintain(ctx)
				b.Take(now, 1) // share charged at born+100ms: opens about born+3.1s
				now = born + int64(window) - int64(100*time.Millisecond)
				at.Store(now)
				cfg.Window = 4 * time.Second // reload: a new budget
				b = l.Budget(cfg, members)
				l.Maintain(ctx)
				b.Take(now, 1)
			}
			first := int64(-1)
			for now < born+int64(4*window) {
				now += int64(50 * time.Millisecond)
				at.Store(now)
				l.Maintain(ctx)
				if tk, d := b.Take(now, 1); d.Allowed {
					b.Finish(now, &tk, 1)
					first = now
					break
				}
			}
			t.Logf("%s: first admission %v after the node started (window %v)", tc, time.Duration(first-born), window)
			// Everything the unknown history holds is from before born:
			// gone from the window by born+window (+ a bucket, + the
			// 4 s window after the reload in the second case).
			bound := born + int64(window) + int64(100*time.Millisecond) // + the 50 ms steps
			if tc == "reload in first window" {
				bound = born + int64(4*time.Second) + int64(100*time.Millisecond)
			}
			if first < 0 || first > bound {
				t.Errorf("%s: the node's share opened only %v after its start (never: -1), a window after its start is %v",
					tc, time.Duration(first-born), time.Duration(bound-born))
			}
		})
	}
}
