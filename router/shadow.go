package router

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/reply"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// A tenant in shadow mode ([[tenants]] mode = "shadow") is decided exactly
// as if enforced — its windows and slots count what enforcement would
// admit, the decisions metric counts what it would refuse — but a request
// its limits refuse is served anyway, uncharged (enforcement would not
// have charged it), with x-ringgate-shadow-refused naming the limit, a
// ringgate_shadow_refusals_total count and a shadow_refusal log line (one
// a second per tenant at most, with how many were not logged). The
// provider's limits are not the tenant's: they still refuse.

// shadowLogEvery bounds the shadow_refusal lines of one tenant.
const shadowLogEvery = time.Second

// meter is a logmeter.Meter: a tenant's, or a provider budget's.
type meter interface {
	Allow(now int64, every time.Duration) (bool, int64)
}

// shadowRefused marks, counts and logs a request t's limits refused (d)
// and that is served anyway.
func (r *Router) shadowRefused(ctx *fasthttp.RequestCtx, t *tenant.Tenant, d *limiter.Decision) {
	reply.SetRateHeaders(&ctx.Response.Header, d)
	t.Counters().Refused(d.Limited)
	r.shadowRefusal(ctx, t.Name, &t.ShadowLog, d.Limited, d.RetryAfter)
}

// shadowRefusal marks, counts and logs (at most once a shadowLogEvery
// per limit) a refusal on dim by the shadow limit name.
func (r *Router) shadowRefusal(ctx *fasthttp.RequestCtx, name string, m meter, dim limiter.Dimension, retry time.Duration) {
	ctx.Response.Header.Set("x-ringgate-shadow-refused", dim.String())
	r.metrics.Shadow.WithLabelValues(name, dim.String()).Inc()
	ok, muted := m.Allow(time.Now().UnixNano(), shadowLogEvery)
	if !ok {
		return
	}
	r.log.Info("shadow_refusal", "tenant", name, "limit", dim.String(), "retry_after_ms", retry.Milliseconds(),
		"not_logged", muted)
}

// budgetShadowed marks, counts and logs the refusal of c's provider
// budget in shadow mode ([[upstreams]] mode = "shadow"), for a call that
// is served.
func (r *Router) budgetShadowed(ctx *fasthttp.RequestCtx, c *call) {
	if b, d := c.bud.Shadowed(); b != nil {
		r.shadowRefusal(ctx, b.ShadowName(), b.ShadowMeter(), d.Limited, d.RetryAfter)
	}
}
