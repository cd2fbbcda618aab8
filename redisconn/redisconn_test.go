package redisconn

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ringgate/ringgate/internal/redistest"
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

// In a Cluster a dead master fails fast the calls on its keys only: a key
// on a live master is still served. With one breaker for the whole Cluster
// the first failure opened it for every key, and a node's provider budget
// (on a live master) fell back to its strict share again and again while
// the master holding its snapshots failed over.
func TestClusterMasterDownFailsOnlyItsKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cl := redistest.StartCluster(t, 3)
	c, err := New(Config{Addrs: cl.Addrs(), Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	keyOn := map[string]string{} // master address → a key it serves
	for i := 0; len(keyOn) < 2 && i < 1000; i++ {
		k := fmt.Sprintf("k{%d}", i)
		m, err := c.cluster.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := keyOn[m.Options().Addr]; !ok {
			keyOn[m.Options().Addr] = k
		}
	}
	if len(keyOn) < 2 {
		t.Fatal("no two keys on different masters")
	}
	var deadAddr, deadKey, liveKey string
	for addr, k := range keyOn {
		if deadAddr == "" {
			deadAddr, deadKey = addr, k
		} else {
			liveKey = k
		}
	}
	set := func(k string) error {
		return c.CallKey(ctx, k, 0, func(ctx context.Context) error { return c.Client().Set(ctx, k, "v", 0).Err() })
	}
	for _, k := range []string{deadKey, liveKey} {
		if err := set(k); err != nil {
			t.Fatalf("set %s before the kill: %v", k, err)
		}
	}
	cl.ByAddr(deadAddr).Kill()
	if err := set(deadKey); err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("the first call to the killed master: %v, want its own failure", err)
	}
	if err := set(deadKey); !errors.Is(err, ErrUnavailable) {
		t.Errorf("the next call to the killed master: %v, want %v (failing fast)", err, ErrUnavailable)
	}
	if err := set(liveKey); err != nil {
		t.Errorf("a key on a live master, another master down: %v, want it served", err)
	}
	if err := c.Call(ctx, 0, func(ctx context.Context) error { return c.Client().Set(ctx, liveKey, "v", 0).Err() }); err != nil {
		t.Errorf("a call outside any key's breaker: %v, want it served", err)
	}
}
