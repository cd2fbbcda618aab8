package spill

import (
	"slices"
	"sync/atomic"
	"testing"

	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/limiter"
)

// A limiter state's buckets become budget uses in bucket order, requests
// and tokens of one bucket in one use.
func TestSeedMergesBuckets(t *testing.T) {
	var s limiter.State
	s.Requests.Buckets = []limiter.Bucket{{Index: 3, Value: 1}, {Index: 5, Value: 2}}
	s.Tokens.Buckets = []limiter.Bucket{{Index: 1, Value: 10}, {Index: 5, Value: 20}, {Index: 4, Value: 7}}
	got := seed(s)
	want := []lease.Use{
		{Bucket: 1, Amount: lease.Amount{Tokens: 10}},
		{Bucket: 3, Amount: lease.Amount{Requests: 1}},
		{Bucket: 4, Amount: lease.Amount{Tokens: 7}},
		{Bucket: 5, Amount: lease.Amount{Requests: 2, Tokens: 20}},
	}
	if !slices.Equal(got, want) {
		t.Errorf("seed %+v, want %+v", got, want)
	}
}

// A tenant spills after Hot ticks in a row above the threshold, and one
// tick below starts the count again.
func TestHeatTurnsHot(t *testing.T) {
	h := make(Heat)
	above := int64(2 * 100 * Tick.Seconds()) // 200/s
	below := int64(50 * Tick.Seconds())      // 50/s
	if _, hot := h.Measure("a", above, 100); hot {
		t.Fatal("hot after one tick")
	}
	if _, hot := h.Measure("a", below, 100); hot || h["a"] != 0 {
		t.Fatalf("a tick below kept the count at %d", h["a"])
	}
	h.Measure("a", above, 100)
	rate, hot := h.Measure("a", above, 100)
	if !hot || rate != 200 {
		t.Errorf("after %d ticks above: hot %v at %v/s", hotTicks, hot, rate)
	}
	if _, ok := h["a"]; ok {
		t.Error("a tenant that turned hot is still counted")
	}
}

// A spill cools after Cool ticks in a row below half the threshold.
func TestCoolingEnds(t *testing.T) {
	var c Cooling
	low, high := int64(10*Tick.Seconds()), int64(60*Tick.Seconds())
	for i := range coolTicks - 1 {
		if c.Cooled(low, 100) {
			t.Fatalf("cooled after %d ticks", i+1)
		}
	}
	if c.Cooled(high, 100) {
		t.Fatal("cooled on a tick above half the threshold")
	}
	for range coolTicks - 1 {
		c.Cooled(low, 100)
	}
	if !c.Cooled(low, 100) {
		t.Errorf("not cooled after %d ticks below half the threshold", coolTicks)
	}
}

// A holder counts its tenant once while it has a spill, and a late end of
// an older epoch does not undo a newer one's.
func TestHolderCounts(t *testing.T) {
	var live atomic.Int64
	h := NewHolder(&live)
	a, b := &Spill{Owner: "x"}, &Spill{Owner: "y"}
	h.Store(a)
	if !h.CompareAndSwap(a, b) || h.CompareAndSwap(a, nil) || live.Load() != 1 {
		t.Fatalf("live %d with one spill, want 1", live.Load())
	}
	h.CompareAndSwap(b, nil)
	if live.Load() != 0 {
		t.Errorf("live %d with none, want 0", live.Load())
	}
	h.EndEpoch(5)
	h.EndEpoch(3)
	if h.Ended() != 5 {
		t.Errorf("ended %d, want 5", h.Ended())
	}
}
