package router

import (
	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/router/internal/models"
	"github.com/ringgate/ringgate/router/internal/reply"
)

// serveModels answers GET /v1/models (and /v1/models/{id}) itself, to a
// known key, from the config in force (package models).
func (r *Router) serveModels(ctx *fasthttp.RequestCtx) {
	r.tell.SetNode(&ctx.Response.Header)
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
	v, missing := models.Answer(st.Cfg.Upstreams, string(ctx.Path()), anthropic)
	if v == nil {
		reply.Fail(ctx, fasthttp.StatusNotFound, "invalid_request_error", "model_not_found",
			"The model '"+missing+"' is not served by this gateway.")
		return
	}
	reply.JSON(ctx, fasthttp.StatusOK, v)
}
