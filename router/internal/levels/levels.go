// Package levels decides a request on the levels of its tenant's limits
// above the tenant: its limit on the request's model
// ([[tenants.model_limits]]) and its team's ([[teams]]).
//
// A tenant's request counts on every level of limits that applies to it:
// the tenant's own, its limit on the request's model and its team's. Each
// level beyond the tenant is an entity of its own (package tenant) that
// hands over, snapshots, reports deltas and falls back exactly like a
// tenant; the ring pins all of a team's entities to the team (ring.Pins),
// so the node that owns a tenant owns every level of it and decides them
// all in RAM, with no extra hop. A request is charged on its tenant first,
// then on each level; a level that refuses takes back what the others
// charged, so it is charged on all of them or none.
//
// The package owns what a call holds of its levels (a Set): which limiter
// counts it on each (the level's owner limiter or its fallback share),
// charging them all or none, taking them back, the check a line's head
// makes, settling them, and the levels-used header an owner answers a hop
// with. It knows nothing of calls, HTTP, rings or views: where a level is
// decided (Placer), the node's clock, admitting beside members cut off and
// reporting a delta to an owner (Node), and the fallback ledgers (Ledger)
// are the router's, which implements them.
package levels

import (
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/away"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// Placer says where a call's levels are decided: Choose asks it.
type Placer interface {
	// Away reports whether the ring places the entity named on another
	// node than this one.
	Away(name string) bool
	// Share is e's fallback share on this node, and whether anything
	// fits in it: a limit smaller than the member count leaves a share of
	// zero.
	Share(e *tenant.Tenant) (*limiter.Tenant, bool)
}

// Node is what charging a level needs of the node.
type Node interface {
	// Clock is the node's clock, Unix ns.
	Clock() int64
	// Admit admits on lim, into tk and d; owned: the limiter of an
	// entity this node counts, which keeps to what the members cut off
	// from this node leave it.
	Admit(lim *limiter.Tenant, owned bool, now, cost int64, tk *limiter.Ticket, d *limiter.Decision)
	// Report sends a delta of a call admitted here to the node that
	// counts e now.
	Report(e *tenant.Tenant, d limiter.Delta)
}

// Ledger keeps what this node admits for an entity it does not count (on
// the entity's fallback share, or counted away) in the entity's ledger
// (package away), which reports it to the node that counts it.
type Ledger interface {
	Admitted(e *tenant.Tenant, tk *limiter.Ticket) *away.Entry
	Finished(e *tenant.Tenant, fb *away.Entry, d limiter.Delta)
}

// level is what a call holds of one level of its limits.
type level struct {
	e   *tenant.Tenant
	lim *limiter.Tenant // the level's owner limiter, or its fallback share
	tk  limiter.Ticket
	fb  *away.Entry // admitted on the fallback share: its ledger entry
	// d is what the level said of the call; shadow: the level is in
	// shadow mode and refused it, and it is served without a charge on it.
	d      limiter.Decision
	shadow bool
	// used is what the level's windows held once it admitted the call
	// (requests, tokens), for the edge that relays the answer.
	used [2]int64
	// away: the ring places the level on another node than the tenant
	// (the members do not agree on the pins yet: node/pins.go). It is not
	// decided here; the call is reported to the level's owner, which
	// counts it (tk is a tally, fb its ledger entry).
	away bool
}

// Set is what a call holds of the levels of its tenant's limits: at most
// its model's and its team's. The zero Set holds none.
type Set struct {
	l [2]level
	n int
}

// Choose picks, for each level of t's limits for model, the limiter
// matching the tenant's (lim): the level's owner limiter on the owner, its
// fallback share on a node that serves the tenant on its share, or that
// owns the tenant but not the level. A spilled tenant's levels are not
// enforced on the spill (tenants with levels do not spill), and are not
// chosen. It reports false when a level's share is zero.
func (s *Set) Choose(t *tenant.Tenant, model string, lim *limiter.Tenant, p Placer) bool {
	s.n = 0
	var buf [2]*tenant.Tenant
	for _, e := range t.Levels(model, &buf) {
		el := e.Core().Lim
		switch lim {
		case t.Core().Lim:
			if p.Away(e.Name) {
				// Placed elsewhere until the members agree on the pins:
				// the change that put the tenant on this level is not in
				// force yet; its owner is told of the call.
				s.l[s.n] = level{e: e, away: true}
				s.n++
				continue
			}
		case t.Core().Fb.Made():
			var open bool
			if el, open = p.Share(e); !open {
				return false
			}
		default:
			continue
		}
		s.l[s.n] = level{e: e, lim: el}
		s.n++
	}
	return true
}

// Len is how many levels the set holds.
func (s *Set) Len() int { return s.n }

// Label names level i in messages ("team <name>", "model <model>").
func (s *Set) Label(i int) string { return s.l[i].e.Label }

// Refuser is the entity whose limit refused a call of t: the level
// refused names (1 + its index), or t itself (refused 0).
func (s *Set) Refuser(t *tenant.Tenant, refused int) *tenant.Tenant {
	if refused > 0 {
		return s.l[refused-1].e
	}
	return t
}

// Limiter is the limiter level i counts the call on: its owner limiter or
// its fallback share (nil: counted away).
func (s *Set) Limiter(i int) *limiter.Tenant { return s.l[i].lim }

// Decision is what level i said of the call.
func (s *Set) Decision(i int) limiter.Decision { return s.l[i].d }

// Here calls f with each level decided on this node and its limiter.
func (s *Set) Here(f func(e *tenant.Tenant, lim *limiter.Tenant)) {
	for i := range s.n {
		if l := &s.l[i]; !l.away {
			f(l.e, l.lim)
		}
	}
}

// AwaitHandoff waits, on the owner, while a level's state is being loaded
// (tenant.Tenant.AwaitHandoff); false when the wait ran out.
func (s *Set) AwaitHandoff() bool {
	for i := range s.n {
		if l := &s.l[i]; !l.away && l.lim == l.e.Core().Lim && !l.e.AwaitHandoff() {
			return false
		}
	}
	return true
}
