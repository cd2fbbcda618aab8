package router

import (
	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/away"
	"github.com/ringgate/ringgate/router/internal/cluster"
	"github.com/ringgate/ringgate/router/internal/levels"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// What this node admits under its strict share while a tenant's owner is
// unreachable is still the tenant's usage, kept in the tenant's ledger
// (package away) and reported to the node that counts the tenant now.

// fallbackAdmitted records a call admitted under the fallback share and
// schedules a report.
//
// epoch names the spillover the call was admitted on (0: a fallback share).
func (r *Router) fallbackAdmitted(t *tenant.Tenant, tk *limiter.Ticket, epoch int64) *away.Entry {
	e := t.Core().Fb.Admitted(r.view.Load().Owner(t.Name), tk, epoch, r.ids)
	r.reportFallbackSoon(t)
	return e
}

// reportFallbackSoon schedules a report of the tenant's ledger.
func (r *Router) reportFallbackSoon(t *tenant.Tenant) {
	t.Core().Fb.ReportSoon(func() { r.reportFallback(t) })
}

// fallbackFinished accounts for the end of a call admitted under the
// fallback share: d is what it changed (limiter.FinishDelta), or what
// taking it back changed (spillRoom.Cancel); away.Ledger.Finished says
// how.
func (r *Router) fallbackFinished(t *tenant.Tenant, e *away.Entry, d limiter.Delta) {
	switch t.Core().Fb.Finished(e, d, r.ids) {
	case away.Alone:
		r.reportDelta(t, d)
	case away.Queued:
		r.reportFallbackSoon(t)
	}
}

// reportFallback tells the node that counts the tenant now what this node
// admitted for it under its share; what cannot be delivered stays.
func (r *Router) reportFallback(t *tenant.Tenant) {
	n := t.Core().Fb.Report(func(ds []limiter.Delta) error { return r.moves.Deliver(t, "", ds, 0) })
	if n > 0 {
		r.metrics.FallbackReported.Add(float64(n))
	}
}

// reportFallbacksTo reports the ledgers of tenants whose owner the view v
// changed (from the one they could not reach): after a crash the new owner
// counts what the edges admitted meanwhile.
func (r *Router) reportFallbacksTo(v *cluster.Lookup) {
	for name, t := range r.state.Load().ByName {
		c := t.Peek()
		if c == nil {
			continue // never served here: nothing admitted, no episode
		}
		owner := v.Owner(name)
		if c.Fb.WaitsFor(owner) {
			go r.reportFallback(t)
		}
		if c.InFallback.Load() {
			// An episode is about one owner: with another, the next
			// episode starts afresh (and is seeded afresh).
			other := c.Fb.Owner() != owner
			if other && c.InFallback.CompareAndSwap(true, false) {
				if c.FbLogged.Load() {
					r.log.Info("fallback", "phase", "end", "tenant", t.Name, "owner", owner, "reason", "new_owner")
				}
				c.FbQueue.Kick()
			}
		}
	}
}

// noteOwnerUsage records what the owner's answer says the tenant has used.
// It allocates nothing: two header lookups and integer parses.
func (r *Router) noteOwnerUsage(t *tenant.Tenant, h *fasthttp.ResponseHeader) {
	if t.Team != nil || t.Models != nil {
		// The x-ratelimit headers report the tightest level, not the
		// tenant's: the owner says what each level used (package levels).
		levels.NoteUsed(t, h.Peek(levels.UsedHeader), r.clock())
		return
	}
	t.Core().Seen.NoteHeaders(r.clock(), h)
}

// seedFromAnswers charges the tenant's fallback share with its share (1/n)
// of the owner's usage as last seen in its answers (away.Seen.Seed); the
// answers are no account of it from before this node left a spill (what
// every node admitted on the spill is only in Redis's window of the
// budget, which is what did not answer), or when told so (blind).
func (r *Router) seedFromAnswers(share *limiter.Tenant, t *tenant.Tenant, n int64, blind bool) string {
	c := t.Core()
	return c.Seen.Seed(share, r.clock(), c.Lim.Window(), n, t.Limits, func(at int64) bool {
		return blind || t.AnswersMissSpill(r.node, at)
	})
}
