package fallback

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

// Admitted records a call admitted under the fallback share and
// schedules a report.
//
// epoch names the spillover the call was admitted on (0: a fallback share).
func (e *Edge) Admitted(t *tenant.Tenant, tk *limiter.Ticket, epoch int64) *away.Entry {
	en := t.Core().Fb.Admitted(e.cfg.View().Owner(t.Name), tk, epoch, e.cfg.IDs)
	e.reportSoon(t)
	return en
}

// reportSoon schedules a report of the tenant's ledger.
func (e *Edge) reportSoon(t *tenant.Tenant) {
	t.Core().Fb.ReportSoon(func() { e.Report(t) })
}

// Finished accounts for the end of a call admitted under the
// fallback share: d is what it changed (limiter.FinishDelta), or what
// taking it back changed (the router's spillRoom.Cancel);
// away.Ledger.Finished says how.
func (e *Edge) Finished(t *tenant.Tenant, en *away.Entry, d limiter.Delta) {
	switch t.Core().Fb.Finished(en, d, e.cfg.IDs) {
	case away.Alone:
		e.cfg.Moves.Report(t, d)
	case away.Queued:
		e.reportSoon(t)
	}
}

// Report tells the node that counts the tenant now what this node
// admitted for it under its share; what cannot be delivered stays.
func (e *Edge) Report(t *tenant.Tenant) {
	n := t.Core().Fb.Report(func(ds []limiter.Delta) error { return e.cfg.Moves.Deliver(t, "", ds, 0) })
	if n > 0 {
		e.cfg.Metrics.FallbackReported.Add(float64(n))
	}
}

// ReportTo reports the ledgers of tenants (byName: those in force) whose
// owner the view v changed (from the one they could not reach): after a
// crash the new owner counts what the edges admitted meanwhile.
func (e *Edge) ReportTo(v *cluster.Lookup, byName map[string]*tenant.Tenant) {
	for name, t := range byName {
		c := t.Peek()
		if c == nil {
			continue // never served here: nothing admitted, no episode
		}
		owner := v.Owner(name)
		if c.Fb.WaitsFor(owner) {
			go e.Report(t)
		}
		if c.InFallback.Load() {
			// An episode is about one owner: with another, the next
			// episode starts afresh (and is seeded afresh).
			other := c.Fb.Owner() != owner
			if other && c.InFallback.CompareAndSwap(true, false) {
				if c.FbLogged.Load() {
					e.cfg.Log.Info("fallback", "phase", "end", "tenant", t.Name, "owner", owner, "reason", "new_owner")
				}
				c.FbQueue.Kick()
			}
		}
	}
}

// NoteUsage records what the owner's answer says the tenant has used.
// It allocates nothing: two header lookups and integer parses.
func (e *Edge) NoteUsage(t *tenant.Tenant, h *fasthttp.ResponseHeader) {
	if t.Team != nil || t.Models != nil {
		// The x-ratelimit headers report the tightest level, not the
		// tenant's: the owner says what each level used (package levels).
		levels.NoteUsed(t, h.Peek(levels.UsedHeader), e.cfg.Clock())
		return
	}
	t.Core().Seen.NoteHeaders(e.cfg.Clock(), h)
}
