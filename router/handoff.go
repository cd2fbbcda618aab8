package router

import (
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/cluster"
	"github.com/ringgate/ringgate/router/internal/moves"
	"github.com/ringgate/ringgate/router/internal/reply"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// The router's part in a handoff is package moves' (holding a tenant's
// requests while this node loads its state, delivering the deltas of calls
// that end here to the node that counts their tenant): here are its
// wiring to the router and the HTTP edge of the delta path.

// deltaTimeout bounds one peer call that a call's end may wait for.
const deltaTimeout = moves.DeltaTimeout

// Moves is this node's part in moving tenants between nodes, for the
// node's handoff.Mover (handoff.Tenants, handoff.Peers).
func (r *Router) Moves() *moves.Node { return r.moves }

// newMoves wires package moves to the router.
func (r *Router) newMoves() *moves.Node {
	return moves.New(moves.Config{
		Self: r.node, Clustered: r.clustered, State: &r.state, Cores: r.cores, Reloads: &r.reloads.mu,
		Clock: r.clk, Log: r.log, Metrics: r.metrics, IDs: r.ids,
		Cluster: (*movesCluster)(r), Peers: (*movesPeers)(r), Quit: r.life.quit,
		MaxHops: maxHops, CatchUp: hopCatchUp,
		Ringless: func() bool {
			v := r.view.Load()
			return r.clustered && (v == nil || v.Ring().Len() == 0)
		},
		Deciding: r.Deciding,
		Applied:  r.spills.CarriedEnded,
	})
}

// reportDelta sends a delta of a call admitted here to the node that counts
// the tenant now (moves.Node.Report).
func (r *Router) reportDelta(t *tenant.Tenant, d limiter.Delta) { r.moves.Report(t, d) }

// sendDeltas sends deltas of calls running on node from ("": this one) for
// t on, in the background (moves.Node.Send).
func (r *Router) sendDeltas(t *tenant.Tenant, from string, ds []limiter.Delta, forwarded int) {
	r.moves.Send(t, from, ds, forwarded)
}

// serveDelta applies deltas a peer reports for a tenant.
func (r *Router) serveDelta(ctx *fasthttp.RequestCtx) {
	info, ok := r.peerPost(ctx)
	if !ok {
		return
	}
	name, err := r.moves.Receive(ctx.PostBody(), info.From, info.Hops)
	switch {
	case errors.Is(err, moves.ErrMalformed):
		reply.Fail(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "invalid_json", "Malformed delta.")
	case errors.Is(err, moves.ErrUnknownTenant):
		reply.Fail(ctx, fasthttp.StatusNotFound, "invalid_request_error", "unknown_tenant", "No tenant named "+name+".")
	default:
		ctx.SetStatusCode(fasthttp.StatusNoContent)
	}
}

// movesCluster is the router as package moves reads its cluster view.
type movesCluster Router

// View is the view in force; a nil one answers as no view (cluster.Lookup's
// methods take a nil receiver).
func (c *movesCluster) View() moves.View { return c.view.Load() }

func (c *movesCluster) Await(wait time.Duration, ok func(moves.View) bool) moves.View {
	v, _ := c.view.Await(wait, func(v *cluster.Lookup) bool { return ok(v) })
	return v
}

func (c *movesCluster) Departed(node string) bool { return c.moving.departed.Has(node) }

// movesPeers is the router as package moves calls peers: signed hops.
type movesPeers Router

func (p *movesPeers) Call(v moves.View, addr, to, path string, msg any, hops int, timeout time.Duration) (int, []byte, error) {
	return (*Router)(p).peerCall(v.(*cluster.Lookup), addr, to, path, msg, hops, timeout)
}

func (p *movesPeers) Signed() bool { return p.hops.Enabled() }
