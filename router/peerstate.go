package router

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/cluster"
	"github.com/ringgate/ringgate/router/internal/hop"
	"github.com/ringgate/ringgate/router/internal/hopsign"
	"github.com/ringgate/ringgate/router/internal/moves"
	"github.com/ringgate/ringgate/router/internal/reply"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// The router's part in moving state peer to peer: the signed endpoint a new
// owner asks a previous owner on (answered by the node's handoff.Mover
// through package moves), and the signed transport package moves calls
// peers with. The protocol itself is the handoff package's.

// serveHandoff answers a new owner asking for tenants' state.
func (r *Router) serveHandoff(ctx *fasthttp.RequestCtx) {
	info, ok := r.peerPost(ctx)
	if !ok {
		return
	}
	tenants, err := moves.DecodeFetch(ctx.PostBody())
	if err != nil {
		reply.Fail(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "invalid_json", "Malformed handoff request.")
		return
	}
	// The members stop before the state leaves.
	body, err := r.moves.HandOver(info.From, tenants, r.spills.EndOwned)
	if err != nil {
		reply.Fail(ctx, fasthttp.StatusServiceUnavailable, "server_error", "not_ready", "This node does not hand state over yet.")
		return
	}
	r.KickQueues(tenants) // frozen: those waiting go to the asker
	ctx.SetContentType("application/octet-stream")
	ctx.SetBody(body)
}

// peerPost checks a peer's POST to one of the peer paths (hop.CheckPost).
// It answers the refusal itself.
func (r *Router) peerPost(ctx *fasthttp.RequestCtx) (hopsign.Info, bool) {
	return hop.CheckPost(ctx, r.hops, r.node, r.metrics.HopsRefused)
}

// peerCall POSTs msg as JSON to path on the peer to (at addr), signed as
// its hops-th hop, and returns the answer's status and body.
func (r *Router) peerCall(v *cluster.Lookup, addr, to, path string, msg any, hops int, timeout time.Duration) (int, []byte, error) {
	return r.peers.Post(addr, to, path, msg, r.signPeer(v, to, hops), timeout)
}

// signPeer signs a peer call to the peer to as this node's hops-th hop,
// on v's ring.
func (r *Router) signPeer(v *cluster.Lookup, to string, hops int) func(*fasthttp.Request) {
	return func(req *fasthttp.Request) { r.hops.Sign(req, r.node, to, v.Version(), hops) }
}

// stateHooks are the router's ears on the tenants of a state.
func (r *Router) stateHooks() tenant.Hooks {
	// r.moves is read when a tenant changes: it is made after the cores.
	return tenant.Hooks{Spills: &r.spills.Node.Spills, Changed: func(name string) { r.moves.NoteChanged(name) }}
}

// tookBack takes an entity back (moved: the tenant's limiter or one of
// its levels' that answered Moved), at once, when the node this one froze
// it for passes a request for it here: that node holds it frozen for this
// one, whose ring gives it the entity, and each frozen for the other,
// every request would bounce between them until Reconcile's wait is over
// (two joins in a row, in CI: a second of 503 tenant_moving). With it go
// the call's tenant and every level of it frozen for the same node: the
// ring pins them together, so a mutual freeze freezes them together, and
// one bounce brings them all back (taken one by one, the second would find
// the request past its one retry). It reports whether moved is back here
// to decide on (each take from the other node is one peer call).
//
// A take is other's own hand-over or nothing (handoff.Mover.TakeBack):
// if the other node's ring has just given it the entity, it is asking for
// it itself and answers busy, and the entity stays where it was.
func (r *Router) tookBack(ctx *fasthttp.RequestCtx, c *call, moved *limiter.Tenant, hops int) bool {
	to := moved.MovedTo()
	f := r.moves.TakeBack()
	if hops == 0 || f == nil || to == "" || to == r.node || to != hopsign.Sender(&ctx.Request.Header) {
		return false
	}
	take := func(e *tenant.Tenant, lim *limiter.Tenant) {
		if lim == e.Core().Lim && lim.MovedTo() == to && r.moves.Owns(e.Name) {
			f(e.Name, to)
			e.AwaitHandoff()
		}
	}
	take(c.t, c.lim)
	c.levels.Here(take)
	return moved.MovedTo() == ""
}

// movedOn passes a request for a tenant this node handed over on to the
// node that has it now. A client request is a first hop; a hop may be
// passed on along the hand-overs (this node handed the tenant over after
// the sender picked it), at most maxHops in all. The new owner may have
// asked for the tenant before this node's gossip view lists it: its
// address is waited for a little. Past the hop limit, or with the new owner
// unreachable, the answer is 503 with Retry-After: the cluster is moving
// the tenant, not the client's fault, and nothing was admitted.
func (r *Router) movedOn(ctx *fasthttp.RequestCtx, t *tenant.Tenant, lim *limiter.Tenant, hops int) bool {
	to := lim.MovedTo()
	if to != "" && to != r.node && hops < maxHops {
		v, _ := r.view.Await(hopCatchUp, func(v *cluster.Lookup) bool { return v != nil && v.Addrs()[to] != "" })
		if handled, streaming := r.toOwner(ctx, v, to, t, hops+1); handled {
			return streaming
		}
	}
	return r.refuseMoving(ctx)
}

// refuseMoving answers a request whose tenant's limits are moving between
// nodes: 503 with Retry-After. Nothing was admitted; the client retries.
func (r *Router) refuseMoving(ctx *fasthttp.RequestCtx) bool {
	r.tell.SetNode(&ctx.Response.Header)
	reply.FailSoon(ctx, fasthttp.StatusServiceUnavailable, "server_error", "tenant_moving",
		"This tenant's limits are moving between gateway nodes; retry in 1s.")
	return false
}
