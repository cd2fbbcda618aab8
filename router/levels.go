package router

import (
	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/admit"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/router/internal/away"
	"github.com/ringgate/ringgate/router/internal/levels"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// The levels of a tenant's limits above the tenant, its model limit and
// its team, are package levels': a call holds them (call.levels). Here is
// the router's side: the call's levels room, the node as the package sees
// it (levelsNode), and the edge's part of the levels-used header.

// levelsNode is the node as package levels sees it (levels.Placer,
// levels.Node, levels.Ledger): a conversion of the router's pointer, so
// handing it over allocates nothing. Its Admit is in cluster.go, beside
// the view it reads.
type levelsNode Router

func (n *levelsNode) Clock() int64 { return (*Router)(n).clock() }

func (n *levelsNode) Away(name string) bool {
	o := n.view.Load().Owner(name)
	return o != "" && o != n.node
}

func (n *levelsNode) Share(e *tenant.Tenant) (*limiter.Tenant, bool) {
	v := n.view.Load()
	return n.fb.Limiter(e, v, v.Owner(e.Name))
}

func (n *levelsNode) Report(e *tenant.Tenant, d limiter.Delta) { (*Router)(n).reportDelta(e, d) }

func (n *levelsNode) Admitted(e *tenant.Tenant, tk *limiter.Ticket) *away.Entry {
	return n.fb.Admitted(e, tk, 0)
}

func (n *levelsNode) Finished(e *tenant.Tenant, fb *away.Entry, d limiter.Delta) {
	n.fb.Finished(e, fb, d)
}

// setLevels picks the limiters of c's levels (levels.Set.Choose); false
// when a level's share is zero.
func (r *Router) setLevels(c *call) bool {
	return c.levels.Choose(c.t, c.req.Model, c.lim, (*levelsNode)(r))
}

// levelLine is where a request that level i of c's limits refused waits
// for the level's room (levels.Set.Line); nil: in its tenant's line.
func (c *call) levelLine(i int) *queue.Queue { return c.levels.Line(i, c.hops) }

// checkLevels is the levels room's decision charging nothing: the first
// level that would refuse (c.refusedBy names it), or d (the tenant's) with
// the tightest headers.
func (r *Router) checkLevels(c *call, d limiter.Decision) limiter.Decision {
	d, refused := c.levels.Check(r.clock(), int64(c.res.Total), d)
	c.refusedOn(refused)
	return d
}

// Take charges the call on each of its levels, all or none
// (levels.Set.Take); c.refusedBy and c.refusedLevel name a level that
// refuses.
func (lr *levelsRoom) Take() admit.Verdict {
	c := (*call)(lr)
	v, refused := c.levels.Take((*levelsNode)(c.r), int64(c.res.Total), c.hops)
	c.refusedOn(refused)
	return v
}

// Cancel takes back what every level took.
func (lr *levelsRoom) Cancel() {
	c := (*call)(lr)
	c.levels.Cancel((*levelsNode)(c.r), c.hops)
}

// refusedOn names the level that refused c: refused is 1 + its index
// (0: none, and nothing changes).
func (c *call) refusedOn(refused int) {
	if refused > 0 {
		c.refusedBy, c.refusedLevel = c.levels.Label(refused-1), refused
	}
}

// headers is what the rate-limit headers of an admitted call say: its
// tenant's decision tightened by each level's. own is what its tenant had
// used (setLevelsUsed).
func (c *call) headers() (d limiter.Decision, own [2]int64) { return c.levels.Headers(&c.d) }

// levelsShadowed marks, counts and logs the refusals of c's levels in
// shadow mode, for a call that is served.
func (r *Router) levelsShadowed(ctx *fasthttp.RequestCtx, c *call) {
	c.levels.Shadowed(func(e *tenant.Tenant, d *limiter.Decision) {
		// Counted and marked; the rate-limit headers keep reporting
		// the limits that are enforced.
		e.Counters().Refused(d.Limited)
		r.shadowRefusal(ctx, e.Name, &e.ShadowLog, d.Limited, d.RetryAfter)
	})
}

// levelsAdmitted records the fallback-share admissions of c's levels in
// their ledgers, like the tenant's (fallback.Edge.Admitted).
func (r *Router) levelsAdmitted(c *call) { c.levels.Admitted((*levelsNode)(r)) }

// finishLevels settles and frees what c holds of its levels, as finish
// does for its tenant (levels.Set.Finish).
func (r *Router) finishLevels(c *call, actual int64) {
	c.levels.Finish((*levelsNode)(r), (*levelsNode)(r), &r.state, actual)
}

// setLevelsUsed writes levels.UsedHeader on a hop's answer: own is what
// the tenant had used (its own decision, before tighten).
func setLevelsUsed(h *fasthttp.ResponseHeader, c *call, own [2]int64) {
	var buf [256]byte // SetBytesV copies: no allocation for a usual line
	h.SetBytesV(levels.UsedHeader, c.levels.AppendUsed(buf[:0], c.t.Name, own))
}
