package redisconn

import (
	"testing"
	"time"
)

func TestBreaker(t *testing.T) {
	var b breaker
	t0 := time.Unix(1_750_000_000, 0)
	if probe, ok := b.allow(t0); !ok || probe {
		t.Fatal("a closed breaker refused")
	}
	if !b.fail(t0, false) {
		t.Fatal("first failure did not report opening")
	}
	if b.fail(t0, false) {
		t.Fatal("second failure reported opening")
	}
	if _, ok := b.allow(t0.Add(BreakerWindow - 1)); ok {
		t.Fatal("allowed inside the window")
	}
	after := t0.Add(BreakerWindow)
	probe, ok := b.allow(after)
	if !ok || !probe {
		t.Fatal("no probe after the window")
	}
	if _, ok := b.allow(after); ok || b.available(after) {
		t.Fatal("a second call went out beside the probe")
	}
	b.release(probe) // the probe told nothing
	probe, ok = b.allow(after)
	if !ok || !probe {
		t.Fatal("no probe after a released one")
	}
	if !b.succeed(probe) {
		t.Fatal("a successful probe did not report closing")
	}
	if probe, ok := b.allow(after); !ok || probe {
		t.Fatal("closed breaker refused or probed")
	}
}
