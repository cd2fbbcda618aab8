package lease

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringgate/ringgate/limiter"
)

// A reload that changes limits.window makes the provider's budget anew on
// the new buckets (Leaser.Budget). Its concurrency has no window: the
// calls admitted before the reload and still running (streams) hold their
// slots on the new budget until they end, there and on every other node
// (its holding in the store is the same field). Before, the new budget
// started empty: 4 calls before a reload and 4 after, 8 for a limit of 4
// (a reviewer's); a second reload in a row must carry them again.
func TestWindowReloadCarriesCallsInFlight(t *testing.T) {
	for name, st := range stores(t) {
		for _, reloads := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/%d reloads", name, reloads), func(t *testing.T) {
				ctx := context.Background()
				var at atomic.Int64 // read by the old budget's give-back too
				at.Store(int64(1000 * time.Hour))
				clock := at.Load
				const limit = 4
				cfg := Config{Key: "winreload-" + name + string(rune('0'+reloads)), Limits: limiter.Limits{Concurrency: limit}, Window: 3 * time.Second}
				a := NewLeaser(LeaserConfig{Store: st, Node: "a", Clock: clock})
				other := NewLeaser(LeaserConfig{Store: st, Node: "b", Clock: clock})
				fill := func(l *Leaser, b *Budget) []Ticket {
					var running []Ticket
					for range 40 {
						if tk, d := b.Take(at.Load(), 1); d.Allowed {
							running = append(running, tk) // a stream: runs on
							continue
						}
						l.Maintain(ctx)
						at.Add(int64(time.Millisecond))
					}
					return running
				}
				b := a.Budget(cfg, nil)
				before := fill(a, b)
				old := b
				for i := range reloads {
					cfg.Window = time.Duration(6+i) * time.Second
					b = a.Budget(cfg, nil) // the old one's give-back runs meanwhile
				}
				after := fill(a, b)
				ob := other.Budget(cfg, nil)
				onOther := fill(other, ob)
				if total := len(before) + len(after) + len(onOther); total > limit {
					t.Fatalf("%d calls in flight at the provider (%d before %d reloads, %d after on the node, %d on another), concurrency %d",
						total, len(before), reloads, len(after), len(onOther), limit)
				}
				// The calls from before end: their slots free on the
				// budget in force, which admits as many again.
				for i := range before {
					old.Finish(at.Load(), &before[i], 0)
				}
				if again := fill(a, b); len(again) != len(before) {
					t.Errorf("%d admitted once the %d calls from before the reload ended", len(again), len(before))
				}
			})
		}
	}
}
