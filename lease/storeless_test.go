package lease

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringgate/ringgate/limiter"
)

// Without Redis (redis.addr = ""), each node keeps to limit / live members.
// A node that starts while the others are busy (a rolling restart, a
// scale-out) charges its share as used for its first window: the window
// already holds what the node it replaces (or the others, at their larger
// shares before it joined) admitted. It had its whole share at once: 450
// and 400 requests in a window for 300 (a reviewer's).
func TestStorelessStartInAClusterChargesItsShare(t *testing.T) {
	const window = 3 * time.Second
	lim := limiter.Limits{Requests: 300}
	for _, tc := range []string{"restart", "join"} {
		t.Run(tc, func(t *testing.T) {
			now := int64(1000 * time.Hour)
			clock := func() int64 { return now }
			var members atomic.Int64
			members.Store(2)
			cfg := Config{Key: "storeless", Limits: lim, Window: window}
			type nd struct {
				l *Leaser
				b *Budget
			}
			mk := func(name string) nd {
				l := NewLeaser(LeaserConfig{Node: name, Clock: clock}) // no store
				return nd{l, l.Budget(cfg, func() int { return int(members.Load()) })}
			}
			nodes := []nd{mk("a"), mk("b")}
			var got []admission
			step := int64(time.Millisecond)
			run := func(dur time.Duration, perNodePerWindow int) {
				end := now + int64(dur)
				carry := make([]float64, len(nodes))
				for ; now < end; now += step {
					for i, n := range nodes {
						if (now/step+int64(3*i))%10 == 0 {
							n.l.Maintain(context.Background())
						}
						carry[i] += float64(perNodePerWindow) * float64(step) / float64(window)
						for ; carry[i] >= 1; carry[i]-- {
							if tk, d := n.b.Take(now, 1); d.Allowed {
								got = append(got, admission{now, 1})
								n.b.Finish(now, &tk, 1)
							}
						}
					}
				}
			}
			run(2*window+window/2, 3000) // both saturated: 150 each a window
			switch tc {
			case "restart":
				nodes[1] = mk("b2") // b restarted (same members count)
			case "join":
				members.Store(3)
				nodes = append(nodes, mk("c"))
			}
			run(2*window, 3000)
			s := &sim{window: window, got: got, now: now}
			maxReq, _, _, _ := s.audit(now)
			t.Logf("%s: fullest window %d of %d", tc, maxReq, lim.Requests)
			if maxReq > lim.Requests {
				t.Errorf("%s without Redis: a window held %d requests, limit %d", tc, maxReq, lim.Requests)
			}
		})
	}
}
