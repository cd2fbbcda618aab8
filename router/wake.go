package router

import (
	"fmt"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/router/internal/hopsign"
	"github.com/ringgate/ringgate/router/internal/reply"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// A node woken from a pause decides nothing until it has caught up
// (package wake says why and when): the router refuses a client request
// with 503 not_ready, a hop with hopsign.RefusedHeader too, and an edge
// whose hop an owner refused answers its client 503 (ownerRefused).

// SetPauseLimit arms the check: from now on, a watchdog silent for longer
// than d means the node was stopped. The node's watchdog must call
// Heartbeat more often than that.
func (r *Router) SetPauseLimit(d time.Duration) {
	r.life.wake.SetPauseLimit(d, r.age())
}

// Heartbeat is the node watchdog's tick.
func (r *Router) Heartbeat() { r.life.wake.Heartbeat(r.age()) }

// SetCatchingUp says whether the node is catching up after a pause.
func (r *Router) SetCatchingUp(on bool) { r.life.wake.SetCatchingUp(on) }

// Deciding reports whether this node decides for what it owns now: it has
// joined and holds a ring, and is not catching up after a pause
// (handoff.Tenants: no snapshot is saved from a stale view).
func (r *Router) Deciding() bool { return r.life.ready.Load() && !r.catchingUp() }

// catchingUp reports whether this node must not decide now.
func (r *Router) catchingUp() bool { return r.life.wake.CatchingUp(r.age) }

// age is the time since the router started, on the monotonic clock.
func (r *Router) age() time.Duration { return time.Since(r.life.started) }

// refuseCatchingUp answers a request that reached this node while it
// catches up after a pause.
func (r *Router) refuseCatchingUp(ctx *fasthttp.RequestCtx, hop bool) bool {
	r.tell.SetNode(&ctx.Response.Header)
	if hop {
		ctx.Response.Header.Set(hopsign.RefusedHeader, "not_ready")
	}
	reply.FailSoon(ctx, fasthttp.StatusServiceUnavailable, "server_error", "not_ready",
		"This gateway node was paused and is catching up with its cluster; retry in 1s.")
	return false
}

// ownerRefused answers a client whose request the owner refused to take as
// a hop (stale, not ready, ...): the owner admitted nothing, and the refusal
// is the cluster's business, not the client's, so it is not relayed (a 401
// would tell the client its key is bad). 503 with Retry-After: by the
// retry the owner has caught up, or the ring has moved the tenant on; the
// strict share is not used, since the owner is alive and may be admitting
// its full limit.
func (r *Router) ownerRefused(ctx *fasthttp.RequestCtx, t *tenant.Tenant, owner, reason string) {
	r.log.Warn("hop_refused_by_owner", "tenant", t.Name, "owner", owner, "reason", reason)
	r.tell.SetNode(&ctx.Response.Header)
	reply.FailSoon(ctx, fasthttp.StatusServiceUnavailable, "server_error", "owner_unavailable",
		fmt.Sprintf("The node enforcing this tenant's limits (%s) did not take the request (%s); nothing was admitted; retry in 1s.", owner, reason))
}
