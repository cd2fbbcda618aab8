package node

import (
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/reserve"
)

// Requests wait in their tenant's queue on its owner (handed there from
// every node) when a new node takes the tenant over: each is decided once
// — by the old owner before it hands the tenant over, or by the new one —
// so the provider runs exactly one call per answer and never more at once
// than the tenant's concurrency, and no client gets a 5xx.
func TestClusterQueuedAcrossRingChange(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const slots = 2
	_, moved := hoPick(t, "qd", []string{"n1", "n2", "n3"}, []string{"n1", "n2", "n3", "n4"}, 1, 0)
	name := moved[0]
	tn := clTenant(name, 1<<20)
	tn.Concurrency = slots
	c := startClusterWith(t, 3, 4*time.Second, clOptions{Queue: &config.Queue{InteractiveWait: 5 * time.Second, BatchWait: 5 * time.Second, MaxDepth: 100}}, tn)
	tok, _ := reserve.NewTokenizer()
	c.fake.SetOptions(fakeupstream.Options{CountTokens: tok.Count, CompletionMin: 5, CompletionMax: 5, Latency: 150 * time.Millisecond})
	c.fake.Reset()
	vias := c.live()
	start := time.Now().Add(50 * time.Millisecond)
	var res []clResult
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 6 { // 6 clients, one call each 200 ms: twice what 2 slots serve
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := c.clLoad(name, vias, i, start.Add(time.Duration(i)*30*time.Millisecond), 200*time.Millisecond, 3*time.Second, 2)
			mu.Lock()
			res = append(res, r...)
			mu.Unlock()
		}()
	}
	time.Sleep(time.Second) // the load runs meanwhile: pacing
	c.addNode()
	wg.Wait()
	codes := answersOf(t, res)
	st := c.fake.Stats()
	recs := c.records(name)
	t.Logf("moved %s to %s with requests queued; answers %v; the provider ran %d calls, at most %d at once, limit %d",
		name, c.owner(name), codes, len(recs), st.MaxConcurrent, slots)
	if len(recs) != codes[200] {
		t.Errorf("the provider ran %d calls for %d admitted requests", len(recs), codes[200])
	}
	if st.MaxConcurrent > slots {
		t.Errorf("%d calls at once at the provider, limit %d", st.MaxConcurrent, slots)
	}
	if codes[200] < 20 {
		t.Errorf("only %d admitted on 2 slots of 150 ms", codes[200])
	}
}
