package router_test

import (
	"bufio"
	"net/http"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
)

// A stream admitted on the provider's concurrency before a reload that
// changes limits.window still runs at the provider after it: the budget
// made for the new window (lease.Leaser.Budget: another bucket width)
// carries its slot. It started empty, and the next call was admitted on
// top: 2 at once at the provider for a concurrency of 1 (a reviewer's).
func TestWindowReloadKeepsProviderCallsInFlight(t *testing.T) {
	const chunks = 100 // 2 s
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("acme", 1000, 1_000_000, 10)},
		fake: fakeupstream.Options{ChunkInterval: 20 * time.Millisecond, CompletionMin: chunks, CompletionMax: chunks,
			Limits: fakeupstream.ProviderLimits{Window: time.Minute, Concurrency: 1}},
		openAI: func(u *config.Upstream) { u.Concurrency = 1 },
	})
	open := func() *http.Response {
		return e.openStream("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 0, true, false), nil)
	}
	r1 := open()
	if r1.StatusCode != http.StatusOK {
		t.Fatalf("first stream: status %d", r1.StatusCode)
	}
	defer r1.Body.Close()
	br := bufio.NewReader(r1.Body)
	if _, err := readEvent(br); err != nil {
		t.Fatal(err)
	}
	// Before the reload the provider's concurrency of 1 is enforced.
	if r := e.post("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 5, false, false), nil); r.status != http.StatusTooManyRequests {
		t.Fatalf("second call before the reload: want 429 from ringgate, got %s", r)
	}
	reloadEnv(t, e, func(c *config.Config) { c.Limits.Window = 30 * time.Second })
	r := e.post("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 5, false, false), nil)
	if r.status != http.StatusTooManyRequests {
		t.Errorf("second call after the reload, the first stream still running: %s; want ringgate's 429", r)
	}
	st := e.fake.Stats()
	t.Logf("second call after the reload, the first stream still running: %d %.160s; provider: max concurrent %d, concurrency breaches %d",
		r.status, r.body, st.MaxConcurrent, st.ConcurrencyBreaches)
	if st.ConcurrencyBreaches > 0 {
		t.Errorf("the provider's concurrency of 1 was not kept after a window reload: second call %d, provider breaches %d (max in flight at once %d)",
			r.status, st.ConcurrencyBreaches, st.MaxConcurrent)
	}
	// The stream ends: its slot frees on the budget in force.
	r1.Body.Close()
	if !poll(settleWait, func() bool {
		return e.post("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 5, false, false), nil).status == http.StatusOK
	}) {
		t.Error("no call admitted once the stream from before the reload ended: its slot was not freed")
	}
}
