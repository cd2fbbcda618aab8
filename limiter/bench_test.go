package limiter

import (
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkDecision measures one admission on all three dimensions followed by
// its settlement and slot release: the whole per-request cost in the limiter.
func BenchmarkDecision(b *testing.B) { benchDecision(b, false) }

// BenchmarkDecisionAfterImport is BenchmarkDecision within a slot TTL of
// an Import, while the calls admitted since are counted apart
// (ownslots.go).
func BenchmarkDecisionAfterImport(b *testing.B) { benchDecision(b, true) }

func benchDecision(b *testing.B, imported bool) {
	tn := NewTenant(Limits{Requests: 1 << 40, Tokens: 1 << 50, Concurrency: 1 << 30}, time.Minute, 10*time.Minute)
	now := t0
	if imported {
		tn.Import(now, State{})
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		now += 1000
		tk, d := tn.Admit(now, 500)
		if !d.Allowed {
			b.Fatal("refused")
		}
		tn.Finish(now, &tk, 420)
	}
}

// BenchmarkDecisionParallel: every goroutine on its own tenant (the common
// case: many tenants on one owner), each with its own clock so that
// nothing is shared but the machine. ns/op is wall time over all the
// goroutines' decisions together.
func BenchmarkDecisionParallel(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		tn := NewTenant(Limits{Requests: 1 << 40, Tokens: 1 << 50, Concurrency: 1 << 30}, time.Minute, 10*time.Minute)
		now := t0
		for pb.Next() {
			now += 1000
			tk, _ := tn.Admit(now, 500)
			tn.Finish(now, &tk, 420)
		}
	})
}

// BenchmarkDecisionHotTenant: all goroutines on one tenant (contended lock).
func BenchmarkDecisionHotTenant(b *testing.B) {
	tn := NewTenant(Limits{Requests: 1 << 40, Tokens: 1 << 50, Concurrency: 1 << 30}, time.Minute, 10*time.Minute)
	var clock atomic.Int64
	clock.Store(t0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			now := clock.Add(1000)
			tk, _ := tn.Admit(now, 500)
			tn.Finish(now, &tk, 420)
		}
	})
}
