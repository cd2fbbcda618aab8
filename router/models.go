package router

import (
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/router/internal/reply"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// GET /v1/models (and /v1/models/{id}) is answered by the node itself from
// the configured upstreams' models: SDKs and tools call it first, and what
// a client may ask for here is what the config routes, whatever else the
// providers list. No limit is charged, no provider called. A caller that
// sends anthropic-version gets Anthropic's shape, every other OpenAI's.

const modelsPath = "/v1/models"

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

// models lists every model the config routes, in config order, once each.
func models(st *tenant.State) []configuredModel {
	var out []configuredModel
	seen := make(map[string]bool)
	for _, uc := range st.Cfg.Upstreams {
		for _, m := range uc.Models {
			if !seen[m] {
				seen[m] = true
				out = append(out, configuredModel{m, uc.Name})
			}
		}
	}
	return out
}

// isModelsPath reports whether path is /v1/models or /v1/models/{id}.
func isModelsPath(path string) bool {
	return path == modelsPath || strings.HasPrefix(path, modelsPath+"/")
}

func (r *Router) serveModels(ctx *fasthttp.RequestCtx) {
	r.setNodeHeader(&ctx.Response.Header)
	if !ctx.IsGet() && !ctx.IsHead() {
		ctx.Response.Header.Set("Allow", "GET")
		reply.Fail(ctx, fasthttp.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "Use GET.")
		return
	}
	st := r.state.Load()
	if authenticate(st, &ctx.Request.Header) == nil {
		reply.Fail(ctx, fasthttp.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
			"Missing or unknown API key. Send it as 'Authorization: Bearer <key>'.")
		return
	}
	anthropic := len(ctx.Request.Header.Peek("anthropic-version")) > 0
	one := func(m configuredModel) any {
		if anthropic {
			return anthropicModel{Type: "model", ID: m.model, DisplayName: m.model, CreatedAt: "1970-01-01T00:00:00Z"}
		}
		return openAIModel{ID: m.model, Object: "model", OwnedBy: m.upstream}
	}
	all := models(st)
	if id, ok := strings.CutPrefix(string(ctx.Path()), modelsPath+"/"); ok {
		for _, m := range all {
			if m.model == id {
				writeJSON(ctx, fasthttp.StatusOK, one(m))
				return
			}
		}
		reply.Fail(ctx, fasthttp.StatusNotFound, "invalid_request_error", "model_not_found",
			"The model '"+id+"' is not served by this gateway.")
		return
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
		writeJSON(ctx, fasthttp.StatusOK, page)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"object": "list", "data": data})
}
