package router

import (
	"context"
	"encoding/json"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/reply"
	"github.com/ringgate/ringgate/router/internal/spill"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// Hot-tenant spillover is package spill's, run on the router's tenants by
// package spillover; here is what of it reads the router's view, peers and
// ledger, and the announcements' HTTP side.

// spillEndWait bounds how long a request on the owner waits for a spill
// that is ending to end (its members told, its window fenced, its ledger
// reported: each bounded), to be decided on the unsealed limiter rather
// than refused with a 503.
const spillEndWait = spill.CallTimeout + spill.FenceWait + deltaTimeout + 150*time.Millisecond

// initSpillover gives packages spill and spillover what they need of the
// router.
func (r *Router) initSpillover() {
	n := &spill.Node{}
	n.Self, n.Clock, n.Leaser, n.Log = r.node, r.clk, r.leaser, r.log
	n.Live = func() int { return r.view.Load().LiveMembers() }
	n.Limits = func() config.Limits { return r.state.Load().Cfg.Limits }
	n.Peers = r.spillPeers
	n.Phase = func(phase string) { r.metrics.Spillover.WithLabelValues(phase).Inc() }
	n.EndWait = spillEndWait
	l := &r.spills
	l.Node, l.State, l.Reloads, l.OwnedNow = n, &r.state, &r.reloads.mu, ownedNow
	l.Cluster, l.Ledger = spillCluster{r}, spillLedger{r}
}

// spillPeers is the view in force as an announcement needs it.
func (r *Router) spillPeers() *spill.View {
	v := r.view.Load()
	if v == nil {
		return nil
	}
	others := make(map[string]string)
	for _, m := range v.Members() {
		if m.Name != r.node && m.Addr != "" {
			others[m.Name] = m.Addr
		}
	}
	return &spill.View{Others: others, Addrs: v.Addrs(),
		Call: func(node, addr string, msg spill.Msg, timeout time.Duration) (int, []byte, error) {
			return r.peerCall(v, addr, node, spill.Path, msg, 1, timeout)
		}}
}

// spillCluster is the router's view and life as the spillover loop needs
// them.
type spillCluster struct{ r *Router }

func (c spillCluster) Owners() func(tenant string) string { return c.r.view.Load().Owner }

// Clustered: the announcements need signatures and a second node.
func (c spillCluster) Clustered() bool {
	v := c.r.view.Load()
	return c.r.hops.Enabled() && c.r.clustered && v != nil && len(v.Members()) > 1
}

func (c spillCluster) Draining() bool { return c.r.life.drain.Draining() }

// spillLedger is the fallback ledger (package fallback) as a spill reports it.
type spillLedger struct{ r *Router }

func (l spillLedger) Report(t *tenant.Tenant) { l.r.fb.Report(t) }

func (l spillLedger) Send(t *tenant.Tenant, d limiter.Delta) {
	l.r.sendDeltas(t, "", []limiter.Delta{l.r.ids.Name(d)}, 0)
}

// RunSpillover measures the tenants' rates and switches them to and from
// spillover until ctx ends.
func (r *Router) RunSpillover(ctx context.Context) { r.spills.Run(ctx) }

// serveSpill takes an owner's announcement.
func (r *Router) serveSpill(ctx *fasthttp.RequestCtx) {
	info, ok := r.peerPost(ctx)
	if !ok {
		return
	}
	var m spill.Msg
	if err := json.Unmarshal(ctx.PostBody(), &m); err != nil || m.Tenant == "" || m.Owner != info.From {
		reply.Fail(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "invalid_json", "Malformed spillover announcement.")
		return
	}
	t := r.state.Load().ByName[m.Tenant]
	if t == nil {
		reply.Fail(ctx, fasthttp.StatusNotFound, "invalid_request_error", "unknown_tenant", "No tenant named "+m.Tenant+".")
		return
	}
	if !m.On {
		r.spillEnded(ctx, t, &m)
		return
	}
	r.spillAnnounced(ctx, t, &m)
}

// spillEnded takes an owner's word that t's spill ended: this node stops
// and answers once what it admitted reached the owner.
func (r *Router) spillEnded(ctx *fasthttp.RequestCtx, t *tenant.Tenant, m *spill.Msg) {
	arrivals, delivered := r.spills.Ended(t, m)
	if !delivered {
		reply.Fail(ctx, fasthttp.StatusServiceUnavailable, "server_error", "ledger_undelivered", "This node could not report what it admitted.")
		return
	}
	reply.JSON(ctx, fasthttp.StatusOK, spill.Reply{Arrivals: arrivals})
}

// spillAnnounced takes an owner's word that t spills: this node joins the
// spill, or renews it, unless it must not serve it.
func (r *Router) spillAnnounced(ctx *fasthttp.RequestCtx, t *tenant.Tenant, m *spill.Msg) {
	arrivals, code, msg := r.spills.Announced(t, m)
	if code != "" {
		reply.Fail(ctx, fasthttp.StatusConflict, "invalid_request_error", code, msg)
		return
	}
	reply.JSON(ctx, fasthttp.StatusOK, spill.Reply{Arrivals: arrivals})
}
