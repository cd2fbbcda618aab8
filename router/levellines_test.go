package router_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
)

// A request its model limit refuses waits in that limit's line, not in
// its tenant's: the tenant's requests for other models go on. One its team
// refuses waits in its tenant's line: a line shared by the team's tenants
// let one's large request hold up another's small one.

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

// A request the team's concurrency refuses waits in its own tenant's line,
// counted as queued for that tenant alone, and goes when the team's slot
// frees.
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

// A teammate's large request waiting for the team's tokens does not hold
// up another tenant's small one the team has room for. With one line for
// the team (the first version of the model lines, a reviewer's), the
// small one joined behind the large one and was refused with a 429 after
// its wait.
func TestTeamWaiterLeavesTeammatesFree(t *testing.T) {
	a, b := tenantCfg("alpha", 1000, 1_000_000_000, 10), tenantCfg("beta", 1000, 1_000_000_000, 10)
	a.Team, b.Team = "research", "research"
	a.InteractiveWait = 500 * time.Millisecond
	b.InteractiveWait = 5 * time.Second
	e := newEnv(t, envConfig{
		window:  2 * time.Second,
		tenants: []config.Tenant{a, b},
		teams:   []config.Team{{Name: "research", TPM: 1000}},
		queue:   &config.Queue{InteractiveWait: 2 * time.Second, BatchWait: 5 * time.Second, MaxDepth: 10},
		fake:    fakeupstream.Options{ChunkInterval: 100 * time.Millisecond, CompletionMin: 30, CompletionMax: 30},
	})
	resp := e.openStream("/v1/chat/completions", keyOf("alpha"), wordsBody(400, true), nil) // ~500 of the team's 1000 tokens
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	defer resp.Body.Close()
	var wg sync.WaitGroup
	var big reply
	wg.Go(func() { big = e.post("/v1/chat/completions", keyOf("beta"), wordsBody(400, false), nil) })
	e.waitTenant("beta", "its large request queued for the team's tokens", func(v tenantView) bool { return v.Queued == 1 })
	if r := e.post("/v1/chat/completions", keyOf("alpha"), chatBody(openAIModel, 50, false, false), nil); r.status != http.StatusOK {
		t.Errorf("alpha's small request, with room in the team and in alpha, while beta's large one waits: %s", r)
	}
	resp.Body.Close()
	wg.Wait()
	if big.status != http.StatusOK {
		t.Errorf("beta's large request: %s", big)
	}
}

// wordsBody is a chat request of words words (about as many tokens),
// asking for 20 more.
func wordsBody(words int, stream bool) []byte {
	m := map[string]any{"model": openAIModel, "max_tokens": 20,
		"messages": []msg{{Role: "user", Content: strings.Repeat("apple ", words)}}}
	if stream {
		m["stream"] = true
		m["stream_options"] = map[string]any{"include_usage": true}
	}
	b, _ := json.Marshal(m)
	return b
}

// A reload that removes a model limit wakes the requests waiting in its
// line: they are decided at once on the new config, not when their retry
// timer fires (for a rate, up to a window: 8 s here; a reviewer's).
func TestReloadRemovingModelLimitWakesItsWaiters(t *testing.T) {
	acme := tenantCfg("acme", 1000, 1_000_000_000, 10)
	acme.ModelLimits = []config.ModelLimit{{Model: openAIModel, RPM: 1}}
	e := newEnv(t, envConfig{
		window:  8 * time.Second,
		tenants: []config.Tenant{acme},
		queue:   &config.Queue{InteractiveWait: 15 * time.Second, BatchWait: 15 * time.Second, MaxDepth: 10},
	})
	if r := e.post("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 5, false, false), nil); r.status != http.StatusOK {
		t.Fatalf("first request: %s", r)
	}
	done := make(chan reply, 1)
	go func() {
		done <- e.post("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 5, false, false), nil)
	}()
	e.waitTenant("acme", "its second request queued for the model's rpm", func(v tenantView) bool { return v.Queued == 1 })
	reloaded := time.Now()
	reloadEnv(t, e, func(c *config.Config) {
		x := acme
		x.ModelLimits = nil
		c.Tenants = []config.Tenant{x}
	})
	r := <-done
	if took := time.Since(reloaded); r.status != http.StatusOK || took > 4*time.Second {
		t.Errorf("the waiter, its model limit removed by a reload: %s after %v, want served at once", r, took.Round(time.Millisecond))
	}
}
