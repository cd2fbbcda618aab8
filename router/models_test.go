package router_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/ringgate/ringgate/config"
)

// GET /v1/models answers from the config, in OpenAI's shape (Anthropic's
// for a caller sending anthropic-version), to a known key only, and sends
// nothing to the provider.
func TestModels(t *testing.T) {
	e := newEnv(t, envConfig{tenants: []config.Tenant{tenantCfg("acme", 10, 10_000, 2)}})
	cases := []struct {
		name, method, path, key string
		hdr                     map[string]string
		status                  int
		check                   func(t *testing.T, body []byte)
	}{
		{name: "list", method: http.MethodGet, path: "/v1/models", key: keyOf("acme"), status: http.StatusOK,
			check: func(t *testing.T, body []byte) {
				var v struct {
					Object string `json:"object"`
					Data   []struct {
						ID, Object, OwnedBy string
					} `json:"data"`
				}
				if err := json.Unmarshal(body, &v); err != nil || v.Object != "list" || len(v.Data) != 2 ||
					v.Data[0].ID != openAIModel || v.Data[1].ID != anthropicModel || v.Data[0].Object != "model" {
					t.Errorf("list: %s (%v)", body, err)
				}
			}},
		{name: "one", method: http.MethodGet, path: "/v1/models/" + anthropicModel, key: keyOf("acme"), status: http.StatusOK,
			check: func(t *testing.T, body []byte) {
				var v struct{ ID, Object string }
				if err := json.Unmarshal(body, &v); err != nil || v.ID != anthropicModel || v.Object != "model" {
					t.Errorf("one: %s (%v)", body, err)
				}
			}},
		{name: "anthropic shape", method: http.MethodGet, path: "/v1/models", key: keyOf("acme"),
			hdr: map[string]string{"anthropic-version": config.DefaultAnthropicVersion}, status: http.StatusOK,
			check: func(t *testing.T, body []byte) {
				var v struct {
					Data []struct {
						Type string `json:"type"`
						ID   string `json:"id"`
					} `json:"data"`
					HasMore bool   `json:"has_more"`
					FirstID string `json:"first_id"`
				}
				if err := json.Unmarshal(body, &v); err != nil || len(v.Data) != 2 || v.Data[0].Type != "model" || v.FirstID != openAIModel {
					t.Errorf("anthropic shape: %s (%v)", body, err)
				}
			}},
		{name: "unknown model", method: http.MethodGet, path: "/v1/models/gpt-nope", key: keyOf("acme"), status: http.StatusNotFound},
		{name: "no key", method: http.MethodGet, path: "/v1/models", status: http.StatusUnauthorized},
		{name: "unknown key", method: http.MethodGet, path: "/v1/models", key: "sk-nobody", status: http.StatusUnauthorized},
		{name: "post", method: http.MethodPost, path: "/v1/models", key: keyOf("acme"), status: http.StatusMethodNotAllowed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := e.do(tc.method, tc.path, tc.key, nil, tc.hdr)
			if err != nil {
				t.Fatal(err)
			}
			if r.status != tc.status {
				t.Fatalf("%s %s: %s, want %d", tc.method, tc.path, r, tc.status)
			}
			if r.status >= 400 {
				var v struct {
					Error struct{ Message, Type, Code string } `json:"error"`
				}
				if err := json.Unmarshal(r.body, &v); err != nil || v.Error.Message == "" {
					t.Errorf("error not in OpenAI's shape: %s", r.body)
				}
			}
			if tc.check != nil {
				tc.check(t, r.body)
			}
		})
	}
	if n := len(e.fake.Records()); n != 0 {
		t.Errorf("the provider got %d requests for /v1/models", n)
	}
}
