package reserve

import (
	"fmt"
	"testing"
)

// BenchmarkEstimate is the per-request hot path: count a ~1k-token prompt
// locally, then estimate the reservation.
func BenchmarkEstimate(b *testing.B) {
	tok := newTokenizer(b)
	prompt := loadPrompt(b)
	e := NewEstimator(500)
	for _, model := range []string{"gpt-4", "gpt-4o"} {
		k := Key{"acme", model}
		seed(e, k, 150, 3)
		tok.Count(model, prompt) // load the encoding outside the timer
		b.Run(model, func(b *testing.B) {
			b.ReportAllocs()
			var r Reservation
			for b.Loop() {
				r = e.Estimate(k, tok.Count(model, prompt), 2000, true)
			}
			b.ReportMetric(float64(r.Prompt), "tokens")
		})
	}
}

// BenchmarkEstimateOnly is Estimate alone, on a key with history.
func BenchmarkEstimateOnly(b *testing.B) {
	e := NewEstimator(500)
	k := Key{"acme", "gpt-4o"}
	seed(e, k, 150, 3)
	b.ReportAllocs()
	for b.Loop() {
		e.Estimate(k, 945, 2000, true)
	}
}

// BenchmarkEstimateParallel runs Estimate from all Ps over 1000 tenants.
func BenchmarkEstimateParallel(b *testing.B) {
	e := NewEstimator(500)
	keys := make([]Key, 1000)
	for i := range keys {
		keys[i] = Key{fmt.Sprintf("tenant-%d", i), "gpt-4o"}
		seed(e, keys[i], 150, 1)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			e.Estimate(keys[i%len(keys)], 945, 2000, true)
			i++
		}
	})
}

// BenchmarkSettle is the settlement of an existing history (EWMA update).
func BenchmarkSettle(b *testing.B) {
	e := NewEstimator(500)
	k := Key{"acme", "gpt-4o"}
	seed(e, k, 150, 3)
	r := e.Estimate(k, 945, 2000, true)
	b.ReportAllocs()
	for b.Loop() {
		e.Settle(r, Usage{945, 150})
	}
}
