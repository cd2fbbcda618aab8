package lease

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringgate/ringgate/fair"
	"github.com/ringgate/ringgate/limiter"
)

// What the division costs: decoding every node's report and dividing three
// dimensions (outside the budget's lock), and a node's own wants from its
// flows (under it: every TakeFor and Finish waits for it).
func BenchmarkDivideReports(b *testing.B) {
	for _, nodes := range []int{3, 20, 50} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			bud := NewBudget(Config{Key: "k", Limits: limiter.Limits{Requests: 10000, Tokens: 1e7, Concurrency: 100}, Window: time.Minute, BandFloor: 0.25}, nil)
			var own [3][]fair.Want
			reports := map[string][]byte{}
			for n := range nodes {
				var w [3][]fair.Want
				for d := range 3 {
					for band := range 2 {
						for g := range 16 {
							w[d] = append(w[d], fair.Want{Band: band, Weight: float64(1 + g), Amount: float64(10 * (g + n + 1))})
						}
					}
				}
				if n == 0 {
					own = w
				}
				reports[fmt.Sprintf("n%d", n)] = encodeReport(w)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				bud.divide(int64(time.Hour), "n0", bud.cfg.Limits, 1, own, reports)
			}
		})
	}
}

func BenchmarkWantsLocked(b *testing.B) {
	for _, flows := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("flows=%d", flows), func(b *testing.B) {
			bud := NewBudget(Config{Key: "k", Limits: limiter.Limits{Requests: 10000, Tokens: 1e7, Concurrency: 100}, Window: time.Minute, BandFloor: 0.25}, nil)
			now := int64(time.Hour)
			for i := range flows {
				f := flow(fmt.Sprintf("t%d", i), i%2, float64(1+i%7))
				bud.mu.Lock()
				bud.flowAsked(bud.flowLocked(&f), now, int64(100+i))
				bud.mu.Unlock()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				bud.mu.Lock()
				bud.wantsLocked(now, nil)
				bud.mu.Unlock()
			}
		})
	}
}
