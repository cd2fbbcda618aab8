package router

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/lease"
)

const learnedReloadTOML = `
[node]
name = "n1"
[[tenants]]
name = "acme"
keys = ["sk-acme-1"]
rpm = 100
[[upstreams]]
name = "oa"
base_url = "http://127.0.0.1:9"
models = ["m1", "m2"]
rpm = 300
`

// A learned budget made (learnModel, on an answer) while a reload runs
// buildBudgets is kept by the leaser and keeps its line. Made after
// buildBudgets looked at the upstream's learned budgets and before its
// leaser.Retain, it was dropped from both yet stayed in the learned map: no
// leaser round gave it a block, so every request for the model was refused
// until the next reload.
func TestLearnedBudgetMadeDuringReloadIsKept(t *testing.T) {
	// More upstreams after "oa": buildBudgets takes a while between
	// looking at oa's learned budgets and Retain.
	toml := learnedReloadTOML
	for i := range 200 {
		toml += fmt.Sprintf("[[upstreams]]\nname = \"u%d\"\nbase_url = \"http://127.0.0.1:9\"\nmodels = [\"x%d\"]\nrpm = 10\n", i, i)
	}
	cfg, err := config.Parse([]byte(toml), "learned.toml")
	if err != nil {
		t.Fatal(err)
	}
	l := lease.NewLeaser(lease.LeaserConfig{Store: lease.NewInmemStore(), Node: "n1", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	r, err := New(Options{Config: cfg, Leaser: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	orphaned := 0
	for round := range 100 {
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := r.Reload(cfg); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			pb := r.state.Load().budgets[r.state.Load().providers[0]]
			lim := lease.Observed{Limited: true, Limit: 60, Remaining: 60, Reset: time.Second}
			r.learnModel(pb.learned, "m1", lim, lease.Observed{}, "x-ratelimit-limit-requests")
		}()
		wg.Wait()
		pb := r.state.Load().budgets[r.state.Load().providers[0]]
		lb := pb.learned.get("m1")
		if lb == nil {
			t.Fatal("no learned budget")
		}
		_, inLeaser := l.Stats()[lb.Key()]
		r.lines.mu.Lock()
		line := r.lines.byKey[lb.Key()]
		r.lines.mu.Unlock()
		if !inLeaser || line != lb.line {
			orphaned++
			if orphaned == 1 {
				t.Logf("round %d: learned budget %s in the leaser %v, its line in r.lines.byKey %v", round, lb.Key(), inLeaser, line == lb.line)
				// What a request for m1 finds: a budget no round serves.
				l.Maintain(context.Background())
				_, d := lb.Take(time.Now().UnixNano(), 10)
				l.Maintain(context.Background())
				_, d2 := lb.Take(time.Now().UnixNano(), 10)
				t.Logf("takes on it after rounds of the leaser: %v, %v", d.Allowed, d2.Allowed)
			}
		}
		// Forget it again for the next round.
		r.learnModel(pb.learned, "m1", lease.Observed{Limited: true, Limit: 300, Remaining: 300, Reset: time.Second}, lease.Observed{}, "x")
	}
	if orphaned > 0 {
		t.Errorf("%d of 100 rounds left the learned budget outside the leaser or its line", orphaned)
	}
}
