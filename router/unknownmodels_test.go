package router_test

// A request for a model no upstream lists goes to the first upstream
// (limits.unknown_models = "default"); with "refuse" it gets a 400
// model_not_found naming the model, is charged nothing and reaches no
// upstream. A reload switches the rule.

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/ringgate/ringgate/config"
)

func TestUnknownModels(t *testing.T) {
	t.Parallel()
	const unknown = "gpt-nope"
	e := newEnv(t, envConfig{tenants: []config.Tenant{tenantCfg("acme", 100, 1_000_000, 10)}})

	// "default" (the default): the first upstream serves it.
	if r := e.post("/v1/chat/completions", keyOf("acme"), chatBody(unknown, 5, false, false), nil); r.status != http.StatusOK {
		t.Fatalf("default: unknown model: %s, want 200", r)
	}
	recs := e.waitRecords(1)
	if recs[0].Model != unknown || recs[0].APIKey != openAIUpKey {
		t.Fatalf("default: the provider got model %q with key %q, want %q at the first upstream", recs[0].Model, recs[0].APIKey, unknown)
	}
	before := e.waitTenant("acme", "nothing in flight", func(v tenantView) bool { return v.InFlight.Used == 0 })

	reloadEnv(t, e, func(c *config.Config) { c.Limits.UnknownModels = config.UnknownModelsRefuse })
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", string(chatBody(unknown, 5, false, false))},
		{"/v1/messages", string(messagesBody(unknown, 5, false))},
	} {
		r := e.post(tc.path, keyOf("acme"), []byte(tc.body), nil)
		var v struct {
			Error struct{ Message, Type, Code string } `json:"error"`
		}
		if err := json.Unmarshal(r.body, &v); err != nil || r.status != http.StatusBadRequest ||
			v.Error.Type != "invalid_request_error" || v.Error.Code != "model_not_found" {
			t.Errorf("refuse: %s %s: %s, want 400 model_not_found", tc.path, unknown, r)
		}
		if !strings.Contains(v.Error.Message, unknown) || !strings.Contains(v.Error.Message, "/v1/models") {
			t.Errorf("refuse: %s: message %q names neither the model nor GET /v1/models", tc.path, v.Error.Message)
		}
	}
	after, err := e.tenant("acme")
	if err != nil {
		t.Fatal(err)
	}
	if after.Requests.Used != before.Requests.Used || after.Tokens.Used != before.Tokens.Used || after.InFlight.Used != 0 {
		t.Errorf("refuse: charged: before %+v, after %+v", before, after)
	}
	if n := len(e.fake.Records()); n != 1 {
		t.Errorf("refuse: the provider got %d requests, want the 1 from before the reload", n)
	}

	// A listed model is still served.
	if r := e.post("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 5, false, false), nil); r.status != http.StatusOK {
		t.Errorf("refuse: listed model: %s, want 200", r)
	}
}
