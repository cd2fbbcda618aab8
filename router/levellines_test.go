package router_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
)

// A request a level of its tenant's limits refuses (its model's, its
// team's) waits in that level's line, not in its tenant's: the tenant's
// other requests go on.

// A tenant with a concurrency of 1 on one model and no limit on another:
// one batch request for the limited model waits for its slot, held by a
// long stream. The tenant's interactive requests for the other model are
// under every limit that applies to them and are all served. In the
// tenant's line, the batch waiter held them up, and once its share's turn
// came (one admission in four) refused every one of them with a 429 for as
// long as it waited: 7 of 10 over three windows (a reviewer's).
func TestModelLimitWaiterLeavesOtherModelsFree(t *testing.T) {
	acme := tenantCfg("acme", 100_000, 1_000_000_000, 1000)
	acme.ModelLimits = []config.ModelLimit{{Model: "gpt-4o", Concurrency: 1}}
	e := newEnv(t, envConfig{
		window:  time.Second,
		tenants: []config.Tenant{acme},
		queue:   &config.Queue{InteractiveWait: 500 * time.Millisecond, BatchWait: 6 * time.Second, MaxDepth: 100},
		fake:    fakeupstream.Options{ChunkInterval: 100 * time.Millisecond, CompletionMin: 30, CompletionMax: 30},
	})
	resp := e.openStream("/v1/chat/completions", keyOf("acme"), chatBody("gpt-4o", 50, true, true), nil) // ~3 s
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	defer resp.Body.Close()
	var wg sync.WaitGroup
	var batch reply
	wg.Go(func() {
		batch = e.post("/v1/chat/completions", keyOf("acme"), chatBody("gpt-4o", 5, false, false),
			map[string]string{"x-ringgate-priority": "batch"})
	})
	v := e.waitTenant("acme", "the batch request queued", func(v tenantView) bool { return v.Queue.Batch.Waiting == 1 })
	if v.Queued != 1 {
		t.Errorf("queued %d while the batch request waits for its model's slot, want 1", v.Queued)
	}
	start := time.Now()
	ok, refused := 0, 0
	for n := 0; n < 200 && time.Since(start) < 2*time.Second; n++ {
		switch r := e.post("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 5, false, false), nil); r.status {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			if refused == 0 {
				t.Logf("first refusal: %s", truncate(string(r.body), 300))
			}
			refused++
		default:
			t.Fatalf("%s", r)
		}
	}
	if refused > 0 {
		t.Errorf("requests for %s (no limit on it, the tenant far under its own): %d served, %d refused while a batch request waited for gpt-4o's slot",
			openAIModel, ok, refused)
	}
	resp.Body.Close() // the slot frees: the batch request goes
	wg.Wait()
	if batch.status != http.StatusOK {
		t.Errorf("the batch request, once the model's slot freed: %s", batch)
	}
}

// A team's line is shared by its tenants: a request the team's
// concurrency refuses waits there, counted as queued for its own tenant
// alone, and goes when the team's slot frees.
func TestTeamLimitWaiterQueuedForItsTenant(t *testing.T) {
	a, b := tenantCfg("alpha", 1000, 1_000_000_000, 10), tenantCfg("beta", 1000, 1_000_000_000, 10)
	a.Team, b.Team = "research", "research"
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{a, b},
		teams:   []config.Team{{Name: "research", Concurrency: 1}},
		queue:   &config.Queue{InteractiveWait: 5 * time.Second, BatchWait: 5 * time.Second, MaxDepth: 10},
		fake:    fakeupstream.Options{ChunkInterval: 100 * time.Millisecond, CompletionMin: 10, CompletionMax: 10},
	})
	resp := e.openStream("/v1/chat/completions", keyOf("alpha"), chatBody(openAIModel, 5, true, true), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	defer resp.Body.Close()
	done := make(chan reply, 1)
	go func() {
		done <- e.post("/v1/chat/completions", keyOf("beta"), chatBody(openAIModel, 5, false, false), nil)
	}()
	e.waitTenant("beta", "its request queued for the team's slot", func(v tenantView) bool { return v.Queued == 1 })
	if v, err := e.tenant("alpha"); err != nil || v.Queued != 0 {
		t.Errorf("alpha: queued %d (%v), want 0: the waiter is beta's", v.Queued, err)
	}
	resp.Body.Close()
	if r := <-done; r.status != http.StatusOK {
		t.Errorf("beta's request once the team's slot freed: %s", r)
	}
}
