// Package models makes the answer to GET /v1/models (and /v1/models/{id})
// from the configured upstreams' models: SDKs and tools call it first, and
// what a client may ask for here is what the config routes, whatever else
// the providers list. It owns the list (each model once, in config order)
// and its two shapes: Anthropic's for a caller that sends
// anthropic-version, OpenAI's for every other.
//
// It knows nothing of keys, tenants or limits, and writes no answer: the
// router checks the method and the caller's key, and answers with what
// Answer gives. No limit is charged, no provider called.
package models

import (
	"strings"

	"github.com/ringgate/ringgate/config"
)

// Path is where the models are listed; Path/{id} is one of them.
const Path = "/v1/models"

type openAIModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"` // the upstream that serves it
}

type anthropicModel struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
}

// configuredModel is one model the config routes, and its upstream.
type configuredModel struct{ model, upstream string }

// models lists every model ups route, in config order, once each.
func models(ups []config.Upstream) []configuredModel {
	var out []configuredModel
	seen := make(map[string]bool)
	for _, uc := range ups {
		for _, m := range uc.Models {
			if !seen[m] {
				seen[m] = true
				out = append(out, configuredModel{m, uc.Name})
			}
		}
	}
	return out
}

// IsPath reports whether path is /v1/models or /v1/models/{id}.
func IsPath(path string) bool {
	return path == Path || strings.HasPrefix(path, Path+"/")
}

// Answer is the JSON answer to GET path (/v1/models or /v1/models/{id})
// from the models ups route, in Anthropic's shape when anthropic, else
// OpenAI's. For a model not routed here it is nil, and missing is the id
// asked for.
func Answer(ups []config.Upstream, path string, anthropic bool) (v any, missing string) {
	one := func(m configuredModel) any {
		if anthropic {
			return anthropicModel{Type: "model", ID: m.model, DisplayName: m.model, CreatedAt: "1970-01-01T00:00:00Z"}
		}
		return openAIModel{ID: m.model, Object: "model", OwnedBy: m.upstream}
	}
	all := models(ups)
	if id, ok := strings.CutPrefix(path, Path+"/"); ok {
		for _, m := range all {
			if m.model == id {
				return one(m), ""
			}
		}
		return nil, id
	}
	data := make([]any, 0, len(all))
	for _, m := range all {
		data = append(data, one(m))
	}
	if anthropic {
		page := map[string]any{"data": data, "has_more": false, "first_id": nil, "last_id": nil}
		if len(all) > 0 {
			page["first_id"], page["last_id"] = all[0].model, all[len(all)-1].model
		}
		return page, ""
	}
	return map[string]any{"object": "list", "data": data}, ""
}
