package provider

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/upstream"
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
// Build is kept by the leaser and keeps its line. Made after Build looked
// at the upstream's learned budgets and before its leaser.Retain, it was
// dropped from both yet stayed in the learned map: no leaser round gave
// it a block, so every request for the model was refused until the next
// reload.
func TestLearnedBudgetMadeDuringReloadIsKept(t *testing.T) {
	// More upstreams after "oa": Build takes a while between
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
	ls := New(Config{Leaser: l, Clock: clockwork.NewRealClock(),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Members: func() int { return 1 }})
	provs := make([]*upstream.Provider, len(cfg.Upstreams))
	for i := range provs {
		provs[i] = &upstream.Provider{}
	}
	budgets := ls.Build(cfg, provs)
	orphaned := 0
	for round := range 100 {
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			budgets = ls.Build(cfg, provs)
		}()
		go func() {
			defer wg.Done()
			lim := lease.Observed{Limited: true, Limit: 60, Remaining: 60, Reset: time.Second}
			ls.learnModel(ls.learnedOf("oa"), "m1", lim, lease.Observed{}, "x-ratelimit-limit-requests")
		}()
		wg.Wait()
		pb := budgets[provs[0]]
		lb := pb.learned.get("m1")
		if lb == nil {
			t.Fatal("no learned budget")
		}
		_, inLeaser := l.Stats()[lb.Key()]
		ls.mu.Lock()
		line := ls.byKey[lb.Key()]
		ls.mu.Unlock()
		if !inLeaser || line != lb.line {
			orphaned++
			if orphaned == 1 {
				t.Logf("round %d: learned budget %s in the leaser %v, its line in the lines by key %v", round, lb.Key(), inLeaser, line == lb.line)
				// What a request for m1 finds: a budget no round serves.
				l.Maintain(context.Background())
				_, d := lb.Take(time.Now().UnixNano(), 10)
				l.Maintain(context.Background())
				_, d2 := lb.Take(time.Now().UnixNano(), 10)
				t.Logf("takes on it after rounds of the leaser: %v, %v", d.Allowed, d2.Allowed)
			}
		}
		// Forget it again for the next round.
		ls.learnModel(pb.learned, "m1", lease.Observed{Limited: true, Limit: 300, Remaining: 300, Reset: time.Second}, lease.Observed{}, "x")
	}
	if orphaned > 0 {
		t.Errorf("%d of 100 rounds left the learned budget outside the leaser or its line", orphaned)
	}
}

// An OpenAI answer for m1 stating a request limit below the upstream's
// makes m1's learned budget; one stating the upstream's forgets it.
func TestLearnFromOpenAIHeaders(t *testing.T) {
	cfg, err := config.Parse([]byte(learnedReloadTOML), "learn.toml")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ls := New(Config{Leaser: lease.NewLeaser(lease.LeaserConfig{Node: "n1", Logger: log}),
		Clock: clockwork.NewRealClock(), Log: log, Members: func() int { return 1 }})
	prov := &upstream.Provider{}
	pb := ls.Build(cfg, []*upstream.Provider{prov})[prov]
	answer := func(limit string) {
		var h fasthttp.ResponseHeader
		h.Set("x-ratelimit-limit-requests", limit)
		h.Set("x-ratelimit-remaining-requests", "50")
		h.Set("x-ratelimit-reset-requests", "1s")
		pb.Learn(upstream.OpenAI, "m1", &h, fasthttp.StatusOK)
	}
	answer("60")
	lb := pb.learned.get("m1")
	if lb == nil || lb.limits.Requests != 60 || lb.from != "x-ratelimit-limit-requests" || pb.model("m1") != lb.Line {
		t.Fatalf("after a limit of 60: learned %+v", lb)
	}
	answer("300")
	if lb := pb.learned.get("m1"); lb != nil {
		t.Fatalf("after the upstream's own limit: still learned %+v", lb)
	}
}
