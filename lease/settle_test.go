package lease

import (
	"context"
	"testing"
	"time"

	"github.com/ringgate/ringgate/limiter"
)

// A call finished at its reservation (its client hung up) and finished
// again on the usage of the answer that came after (the router's
// settleLate) is charged that usage, once, on a leased block as on the
// share the node falls back to when the store is down; its slot is freed
// once.
func TestFinishTwiceLastTokensWin(t *testing.T) {
	for _, down := range []bool{false, true} {
		name := map[bool]string{false: "block", true: "share"}[down]
		t.Run(name, func(t *testing.T) {
			now := int64(1000 * time.Hour)
			st := NewInmemStore()
			l := NewLeaser(LeaserConfig{Store: st, Node: "n0", Clock: func() int64 { return now }})
			b := l.Budget(Config{Key: "twice", Limits: limiter.Limits{Tokens: 100_000, Concurrency: 10}, Window: time.Minute, Settles: true},
				func() int { return 1 })
			st.Down(down)
			var tk Ticket
			var d Decision
			// The first take asks the store for a block; with the store
			// down, the share opens a window after the outage began.
			for range 2000 {
				l.Maintain(context.Background())
				if tk, d = b.Take(now, 300); d.Allowed {
					break
				}
				now += int64(100 * time.Millisecond)
			}
			if !d.Allowed {
				t.Fatalf("not admitted: %+v", d)
			}
			left := func() int64 {
				if down {
					return b.outage.share.Usage(now).Limits.Tokens - b.outage.share.Usage(now).Tokens
				}
				var n int64 // unclamped: the excess may overdraw the block
				for _, blk := range b.blocks {
					n += blk.left.Tokens
				}
				return n
			}
			before := left() + 300   // as if nothing were charged
			b.Finish(now, &tk, 300)  // at the hang-up: the reservation
			b.Finish(now, &tk, 3000) // the answer's usage
			if got := before - left(); got != 3000 {
				t.Errorf("charged %d tokens, want the answer's 3000", got)
			}
			if s := b.Stats(now); s.SlotsUsed != 0 {
				t.Errorf("%d slots in use after the call ended", s.SlotsUsed)
			}
		})
	}
}
