package router

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/router/internal/hopsign"
	"github.com/ringgate/ringgate/router/internal/reply"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// A node that stood still for longer than failure detection (SIGSTOP, a VM
// pause, a long stall) may have been declared dead meanwhile and its
// tenants taken over by others. When it runs again, its ring, its limiters
// and the requests waiting in its accept backlog are all from before: it
// must not decide as an owner on them. The node watches for such a pause
// and catches up (node/wake.go); the router's part is to refuse, until it
// has, to decide anything:
//
//   - while the node says it is catching up (SetCatchingUp), and
//   - whenever the node's watchdog has not ticked (Heartbeat) for longer than
//     the pause limit: the requests the server reads right after a wake-up,
//     before the watchdog's goroutine has run and noticed.
//
// A client request then gets 503 not_ready with Retry-After: 1; a hop is
// refused with x-ringgate-hop-refused: not_ready, so that its edge answers
// 503 too (ownerRefused). Nothing is admitted on stale ownership.

// hopRefusedHeader marks an owner's refusal of a hop: the owner did not take
// the request and admitted nothing. Its value says why: stale (timestamp
// outside hop_skew, e.g. a hop that waited in a paused owner's backlog),
// replay, signature, malformed, target, unsigned, not_ready.
const hopRefusedHeader = "X-Ringgate-Hop-Refused"

// wakeGuard is the router's view of the node's pause watchdog.
type wakeGuard struct {
	limit    atomic.Int64 // ns; 0: no watchdog
	beat     atomic.Int64 // monotonic ns since Router.started of the last tick
	catching atomic.Bool
}

// SetPauseLimit arms the check: from now on, a watchdog silent for longer
// than d means the node was stopped. The node's watchdog must call
// Heartbeat more often than that.
func (r *Router) SetPauseLimit(d time.Duration) {
	r.Heartbeat()
	r.life.wake.limit.Store(int64(d))
}

// Heartbeat is the node watchdog's tick.
func (r *Router) Heartbeat() {
	r.life.wake.beat.Store(int64(time.Since(r.life.started)))
}

// SetCatchingUp says whether the node is catching up after a pause.
func (r *Router) SetCatchingUp(on bool) { r.life.wake.catching.Store(on) }

// Deciding reports whether this node decides for what it owns now: it has
// joined and holds a ring, and is not catching up after a pause
// (handoff.Tenants: no snapshot is saved from a stale view).
func (r *Router) Deciding() bool { return r.life.ready.Load() && !r.catchingUp() }

// catchingUp reports whether this node must not decide now.
func (r *Router) catchingUp() bool {
	if r.life.wake.catching.Load() {
		return true
	}
	limit := r.life.wake.limit.Load()
	return limit > 0 && int64(time.Since(r.life.started))-r.life.wake.beat.Load() > limit
}

// refuseCatchingUp answers a request that reached this node while it
// catches up after a pause.
func (r *Router) refuseCatchingUp(ctx *fasthttp.RequestCtx, hop bool) bool {
	r.setNodeHeader(&ctx.Response.Header)
	ctx.Response.Header.Set("Retry-After", "1")
	if hop {
		ctx.Response.Header.Set(hopRefusedHeader, "not_ready")
	}
	reply.Fail(ctx, fasthttp.StatusServiceUnavailable, "server_error", "not_ready",
		"This gateway node was paused and is catching up with its cluster; retry in 1s.")
	return false
}

// refusalReason names a hop verification error for hopRefusedHeader.
func refusalReason(err error) string {
	switch {
	case errors.Is(err, hopsign.ErrStale):
		return "stale"
	case errors.Is(err, hopsign.ErrBeforeStart):
		return "before_start"
	case errors.Is(err, hopsign.ErrReplay):
		return "replay"
	case errors.Is(err, hopsign.ErrTarget):
		return "target"
	case errors.Is(err, hopsign.ErrMalformed):
		return "malformed"
	case errors.Is(err, hopsign.ErrUnsigned):
		return "unsigned"
	}
	return "signature"
}

// hopRefusal is the reason an owner gave for refusing a hop, "" when it
// took it. Only the owner's own refusals (401 for a hop that failed
// verification, 503 while it catches up) count: a header on a relayed
// upstream answer does not.
func hopRefusal(resp *fasthttp.Response) string {
	switch resp.StatusCode() {
	case fasthttp.StatusUnauthorized, fasthttp.StatusServiceUnavailable:
		return string(resp.Header.Peek(hopRefusedHeader))
	}
	return ""
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
	r.setNodeHeader(&ctx.Response.Header)
	ctx.Response.Header.Set("Retry-After", "1")
	reply.Fail(ctx, fasthttp.StatusServiceUnavailable, "server_error", "owner_unavailable",
		fmt.Sprintf("The node enforcing this tenant's limits (%s) did not take the request (%s); nothing was admitted; retry in 1s.", owner, reason))
}
