package reqlog

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/logmeter"
	"github.com/ringgate/ringgate/router/internal/reply"
)

const (
	// TenantEvery bounds one tenant's refused lines.
	TenantEvery = time.Second
	// NodeLines bounds the refused lines of all tenants in one second: a
	// flood over 100 000 tenants writes NodeLines a second, not 100 000.
	NodeLines = 50
)

// Level names the limit that refused (tenant.Tenant.KindName for the
// first three).
const (
	Tenant        = "tenant"         // the tenant's own limits
	Team          = "team"           // its team's ([[teams]])
	Model         = "model"          // its limit on the model ([[tenants.model_limits]])
	Upstream      = "upstream"       // a provider's budget: an upstream's, or one model's of it
	FallbackShare = "fallback_share" // this node's share while the owner is out of reach: zero
)

// Line is what one refusal says. By names the limit that refused as
// /tenants, /teams and the shadow_refusal line name it.
type Line struct {
	Tenant      string
	Level, By   string
	Dimension   limiter.Dimension
	Limit, Used int64
	RetryAfter  time.Duration
}

// OnDecision is the line of tenant's refusal by the limiter decision d
// of a limit of level, named by.
func OnDecision(tenant, level, by string, d *limiter.Decision) Line {
	ln := Line{Tenant: tenant, Level: level, By: by, Dimension: d.Limited, RetryAfter: d.RetryAfter}
	switch d.Limited {
	case limiter.Requests:
		ln.Limit, ln.Used = d.LimitRequests, d.LimitRequests-d.RemainingRequests
	case limiter.Tokens:
		ln.Limit, ln.Used = d.LimitTokens, d.LimitTokens-d.RemainingTokens
	case limiter.Concurrency:
		ln.Limit, ln.Used = d.LimitConcurrency, d.InFlight
	}
	return ln
}

// OnBudget is the line of tenant's refusal by a provider budget named
// by, with limits l, that decided d. The use is the cluster's as this
// node last heard it (0 for concurrency: held per node).
func OnBudget(tenant, by string, d *lease.Decision, l limiter.Limits) Line {
	ln := Line{Tenant: tenant, Level: Upstream, By: by, Dimension: d.Limited, RetryAfter: d.RetryAfter}
	switch d.Limited {
	case limiter.Requests:
		ln.Limit, ln.Used = l.Requests, d.Used.Requests
	case limiter.Tokens:
		ln.Limit, ln.Used = l.Tokens, d.Used.Tokens
	case limiter.Concurrency:
		ln.Limit = l.Concurrency
	}
	return ln
}

// Refused writes ln, the refusal answered in resp, at now (Unix ns, the
// node's clock) if the bounds let it: tenant is the meter of ln.Tenant's
// lines. A refusal not written is counted, and the next line of its
// tenant says so (not_logged). It allocates nothing when it writes
// nothing.
func (n *Node) Refused(now int64, tenant *logmeter.Meter, ln *Line, resp *fasthttp.Response) {
	ok, muted := tenant.Allow(now, TenantEvery)
	if !ok {
		return
	}
	if !n.all.allow(now) {
		// The node's bound took the tenant's turn: its next line counts
		// this one and those it stood for.
		tenant.Mute.Add(muted + 1)
		return
	}
	n.log.LogAttrs(context.Background(), slog.LevelInfo, "refused",
		slog.String("tenant", ln.Tenant), slog.String("limit_level", ln.Level), slog.String("by", ln.By),
		slog.String("dimension", ln.Dimension.String()), slog.Int64("limit", ln.Limit), slog.Int64("used", ln.Used),
		slog.Int64("retry_after_ms", reply.CeilMs(ln.RetryAfter)), slog.Int64("queued_ms", queuedMs(&resp.Header)),
		slog.String("request_id", string(ID(&resp.Header))),
		slog.Int("status", resp.StatusCode()), slog.String("code", errorCode(resp)), slog.Int64("not_logged", muted))
}

// queuedMs is how long the request answered with h waited in lines
// (x-ringgate-queued-ms), -1 when it did not wait.
func queuedMs(h *fasthttp.ResponseHeader) int64 {
	if ms, err := strconv.ParseInt(string(h.PeekBytes(hQueued)), 10, 64); err == nil {
		return ms
	}
	return -1
}

var hQueued = []byte("X-Ringgate-Queued-Ms")

// nodeCap counts the lines of one second of the node's clock.
type nodeCap struct {
	sec atomic.Int64 // the second counted (Unix)
	n   atomic.Int64 // lines allowed in it
}

// allow reports whether a line may be written at now. Two callers that
// see a new second together may both reset it: a second then holds a few
// lines more than NodeLines, never many. Any other second than the one
// counted is a new one, so a clock set back does not mute the node.
func (c *nodeCap) allow(now int64) bool {
	s := now / int64(time.Second)
	if cur := c.sec.Load(); s != cur && c.sec.CompareAndSwap(cur, s) {
		c.n.Store(0)
	}
	return c.n.Add(1) <= NodeLines
}
