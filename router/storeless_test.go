package router_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/ringgate/ringgate/config"
)

// A standalone node without Redis keeps the provider's limits on its own:
// nothing is unreachable, so a refusal says the limit is reached, never
// that a coordination store is down, and /upstreams and the degraded gauge
// say it is not degraded.
func TestStorelessNodeIsNotDegraded(t *testing.T) {
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("solo", 1000, 1_000_000, 100)},
		openAI:  func(u *config.Upstream) { u.RPM = 1 },
	})
	body := chatBody(openAIModel, 16, false, false)
	if r := e.post("/v1/chat/completions", keyOf("solo"), body, nil); r.status != http.StatusOK {
		t.Fatalf("first request: %s", r)
	}
	r := e.post("/v1/chat/completions", keyOf("solo"), body, nil)
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("second request: %s, want 429 on the provider's rpm", r)
	}
	if msg := string(r.body); strings.Contains(msg, "coordination store") || !strings.Contains(msg, "is reached for now") {
		t.Errorf("refusal on a standalone node: %s", msg)
	}
	u := e.get("/upstreams", "")
	if !json.Valid(u.body) {
		t.Fatalf("/upstreams: %s", u)
	}
	if !strings.Contains(string(u.body), `"degraded"`) {
		t.Fatalf("/upstreams shows no degraded field: %s", u)
	}
	if strings.Contains(string(u.body), `"degraded":true`) {
		t.Errorf("/upstreams says degraded on a node with no store: %s", u)
	}
	m := e.get("/metrics", "")
	for _, line := range strings.Split(string(m.body), "\n") {
		if strings.HasPrefix(line, "ringgate_lease_degraded{") && !strings.HasSuffix(line, " 0") {
			t.Errorf("metric on a node with no store: %s", line)
		}
	}
	if !strings.Contains(string(m.body), "ringgate_lease_degraded{") {
		t.Error("no ringgate_lease_degraded series for the provider's budget")
	}
}
