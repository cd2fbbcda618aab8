package router

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/limiter"
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

// shadowRefused marks, counts and logs a request t's limits refused (d)
// and that is served anyway.
func (r *Router) shadowRefused(ctx *fasthttp.RequestCtx, t *tenant, d *limiter.Decision) {
	dim := d.Limited.String()
	ctx.Response.Header.Set("x-ringgate-shadow-refused", dim)
	setRateHeaders(&ctx.Response.Header, d)
	t.counts.refused(d.Limited)
	r.metrics.shadow.WithLabelValues(t.name, dim).Inc()
	now := time.Now().UnixNano()
	last := t.shadowLog.Load()
	if now-last < int64(shadowLogEvery) || !t.shadowLog.CompareAndSwap(last, now) {
		t.shadowMute.Add(1)
		return
	}
	r.log.Info("shadow_refusal", "tenant", t.name, "limit", dim, "retry_after_ms", d.RetryAfter.Milliseconds(),
		"not_logged", t.shadowMute.Swap(0))
}
