package router_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/internal/knownlimit"
)

// TestReloadRenameKeepsWaitingRequests: a reload renames a tenant, its
// key unchanged. A request of that key waiting in the tenant's line
// (concurrency full) goes on as the renamed tenant's; it was answered 401
// invalid_api_key "removed by a config reload" (found by a reviewer).
//
// The renamed tenant starts from empty windows and no slots while the old
// name's call still runs, so the key gets its concurrency twice at the
// provider: a known limit (docs/limits.md; its name is its ring key, so
// its new owner may be another node), checked only with
// RINGGATE_KNOWN_LIMITS=1.
func TestReloadRenameKeepsWaitingRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of waiting: not in -short")
	}
	acme := tenantCfg("acme", 1000, 1_000_000, 1)
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{acme},
		queue:   &config.Queue{InteractiveWait: 3 * time.Second, BatchWait: 3 * time.Second, MaxDepth: 100},
		fake:    fakeupstream.Options{Latency: 1500 * time.Millisecond},
	})
	body := chatBody(openAIModel, 5, false, false)
	first := make(chan reply, 1)
	go func() { first <- e.post("/v1/chat/completions", keyOf("acme"), body, nil) }()
	if !poll(settleWait, func() bool { v, err := e.tenant("acme"); return err == nil && v.InFlight.Used == 1 }) {
		t.Fatal("first call never in flight")
	}
	queued := make(chan reply, 1)
	go func() { queued <- e.post("/v1/chat/completions", keyOf("acme"), body, nil) }()
	time.Sleep(200 * time.Millisecond) // pacing: the second request joins the line
	reloadEnv(t, e, func(c *config.Config) {
		c.Tenants = []config.Tenant{acme}
		c.Tenants[0].Name = "acme-corp" // same key
	})
	third := make(chan reply, 1)
	go func() { third <- e.post("/v1/chat/completions", keyOf("acme"), body, nil) }()
	q := <-queued
	t.Logf("queued request after the rename: %s", q)
	if q.status == http.StatusUnauthorized {
		t.Errorf("a waiting request of a valid key was answered 401 after its tenant was renamed: %s", q)
	}
	if q.status != http.StatusOK {
		t.Errorf("the waiting request after the rename: %s, want 200", q)
	}
	<-first
	<-third
	st := e.fake.Stats()
	t.Logf("provider: at most %d calls at once, concurrency limit 1", st.MaxConcurrent)
	if st.MaxConcurrent > 1 && knownlimit.Asked() {
		t.Errorf("%d calls of one key at once at the provider, its concurrency limit 1", st.MaxConcurrent)
	}
}
