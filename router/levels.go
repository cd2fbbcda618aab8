package router

import (
	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/limiter"
)

// A tenant's request counts on every level of limits that applies to it:
// the tenant's own, its limit on the request's model ([[tenants.model_limits]])
// and its team's ([[teams]]). Each level beyond the tenant is an entity of
// its own (state.go) that hands over, snapshots, reports deltas and falls
// back exactly like a tenant; the ring pins all of a team's entities to the
// team (ring.Pins), so the node that owns a tenant owns every level of it
// and decides them all in RAM, with no extra hop. A request is charged on
// its tenant first, then on each level; a level that refuses takes back
// what the others charged, so it is charged on all of them or none.

// level is what a call holds of one level of its limits.
type level struct {
	e   *tenant
	lim *limiter.Tenant // the level's owner limiter, or its fallback share
	tk  limiter.Ticket
	fb  *fallbackEntry // admitted on the fallback share: its ledger entry
	// shadow: the level is in shadow mode and refused the call (sd), which
	// is served without a charge on it.
	shadow bool
	sd     limiter.Decision
}

// setLevels picks, for each level of c's limits, the limiter matching the
// tenant's (c.lim): the level's owner limiter on the owner, its fallback
// share on a node that serves the tenant on its share. A spilled tenant's
// levels are not enforced on the spill (tenants with levels do not spill:
// spill.go). It reports false when a level's share is zero.
func (r *Router) setLevels(c *call) bool {
	c.nLevels = 0
	var buf [2]*tenant
	for _, e := range c.t.levels(c.req.Model, &buf) {
		lim := e.lim
		switch c.lim {
		case c.t.lim:
		case c.t.fallback:
			v := r.view.Load()
			var open bool
			if lim, open = r.fallbackLimiter(e, v, v.owner(e.name)); !open {
				return false
			}
		default:
			continue
		}
		c.levels[c.nLevels] = level{e: e, lim: lim}
		c.nLevels++
	}
	return true
}

// awaitLevels waits, on the owner, while a level's state is being loaded
// (awaitHandoff); false when the wait ran out.
func (c *call) awaitLevels() bool {
	for i := range c.nLevels {
		if l := &c.levels[i]; l.lim == l.e.lim && !l.e.awaitHandoff() {
			return false
		}
	}
	return true
}

// checkLevels is admitLevels' decision charging nothing: the first level
// that would refuse (c.refusedBy names it), or d (the tenant's) with the
// tightest headers.
func (r *Router) checkLevels(c *call, d limiter.Decision) limiter.Decision {
	now := r.clock()
	for i := range c.nLevels {
		l := &c.levels[i]
		ld := l.lim.Check(now, int64(c.res.Total))
		if !ld.Allowed && (ld.Moved || !l.e.shadow) {
			c.refusedBy = l.e.label
			return ld
		}
		tighten(&d, &ld)
	}
	return d
}

// admitLevels charges c's levels once its tenant admitted it (c.tk, d, or
// served it in shadow mode). It reports true with d tightened to the
// tightest headers of all levels; false with the refusing level's
// decision, everything c's tenant and levels were charged taken back, and,
// when that decision is Moved, the level's limiter that was handed over.
func (r *Router) admitLevels(c *call, d *limiter.Decision) (bool, limiter.Decision, *limiter.Tenant) {
	if c.nLevels == 0 {
		return true, limiter.Decision{}, nil
	}
	now := r.clock()
	for i := range c.nLevels {
		l := &c.levels[i]
		tk, ld := l.lim.Admit(now, int64(c.res.Total))
		switch {
		case ld.Allowed:
			l.tk = tk
		case !ld.Moved && l.e.shadow:
			l.shadow, l.sd = true, ld
		default:
			for j := range i {
				c.levels[j].lim.Cancel(now, &c.levels[j].tk)
				c.levels[j].shadow = false
			}
			c.lim.Cancel(now, &c.tk)
			tighten(&ld, d)
			c.refusedBy = l.e.label
			return false, ld, l.lim
		}
		tighten(d, &ld)
	}
	return true, limiter.Decision{}, nil
}

// levelsShadowed marks, counts and logs the refusals of c's levels in
// shadow mode, for a call that is served.
func (r *Router) levelsShadowed(ctx *fasthttp.RequestCtx, c *call) {
	for i := range c.nLevels {
		if l := &c.levels[i]; l.shadow {
			r.shadowRefused(ctx, l.e, &l.sd)
		}
	}
}

// levelsAdmitted records the fallback-share admissions of c's levels in
// their ledgers, like the tenant's (fallbackAdmitted).
func (r *Router) levelsAdmitted(c *call) {
	for i := range c.nLevels {
		if l := &c.levels[i]; l.lim == l.e.fallback && !l.shadow {
			l.fb = r.fallbackAdmitted(l.e, &l.tk, 0)
		}
	}
}

// finishLevels settles and frees what c holds of its levels, as finish
// does for its tenant, and lets the lines of the level's tenants try.
func (r *Router) finishLevels(c *call, actual int64) {
	for i := range c.nLevels {
		l := &c.levels[i]
		if l.shadow {
			continue
		}
		if l.lim == l.e.lim {
			if d, handed := l.lim.FinishOrHand(r.clock(), &l.tk, actual); handed {
				r.reportDelta(l.e, d)
			}
			for _, m := range l.e.members {
				m.queue.Kick()
			}
			continue
		}
		var d limiter.Delta
		if l.fb != nil {
			d = limiter.FinishDelta(&l.tk, actual)
		}
		l.lim.Finish(r.clock(), &l.tk, actual)
		if l.fb != nil {
			r.fallbackFinished(l.e, l.fb, d)
		}
		for _, m := range l.e.members {
			m.fbQueue.Kick()
		}
	}
}

// tighten makes d's rate-limit headers report the tightest of d's and
// o's: per dimension, the one with the fewest left.
func tighten(d, o *limiter.Decision) {
	if o.LimitRequests > 0 && (d.LimitRequests <= 0 || o.RemainingRequests < d.RemainingRequests) {
		d.LimitRequests, d.RemainingRequests, d.ResetRequests = o.LimitRequests, o.RemainingRequests, o.ResetRequests
	}
	if o.LimitTokens > 0 && (d.LimitTokens <= 0 || o.RemainingTokens < d.RemainingTokens) {
		d.LimitTokens, d.RemainingTokens, d.ResetTokens = o.LimitTokens, o.RemainingTokens, o.ResetTokens
	}
	if o.LimitConcurrency > 0 && (d.LimitConcurrency <= 0 || o.LimitConcurrency-o.InFlight < d.LimitConcurrency-d.InFlight) {
		d.LimitConcurrency, d.InFlight = o.LimitConcurrency, o.InFlight
	}
}
