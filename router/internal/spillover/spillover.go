// Package spillover runs hot-tenant spillover (package spill) on the
// router's tenants (package tenant): which tenants the loop looks at each
// tick, the owner's loop and its reasons to end a spill, the end of the
// spills this node owns on a view change, a handoff or a reload, and what
// an owner's announcement does to a tenant here. Package spill cannot do it
// itself: package tenant holds a tenant's spill, so it imports spill.
//
// It knows nothing of calls, of HTTP, of the router or of its view: the
// router gives it the state in force, the lock its reloads hold, the view's
// owners and the node's life (Cluster), and its fallback ledger (Ledger).
// It decides what an announcement does; the router answers it.
package spillover

import (
	"sync"
	"sync/atomic"

	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/spill"
	"github.com/ringgate/ringgate/router/internal/status"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// Loop is this node's spillover over its tenants. The router sets the
// exported fields once, before any spill.
type Loop struct {
	Node  *spill.Node                   // this node's side of every spill
	State *atomic.Pointer[tenant.State] // the router's, in force
	// Reloads is held by a reload: a reload keeps the budgets of the
	// spills it sees, and must see each one made.
	Reloads sync.Locker
	Cluster Cluster
	Ledger  Ledger
	// OwnedNow is a tenant's OwnedUntil while this node owns it.
	OwnedNow int64

	// arrived are the tenants that had a request since the last tick.
	arrived spill.Arrivals[*tenant.Tenant]
}

// Cluster is what the loop needs of the node and its view.
type Cluster interface {
	// Owners is the owner of a tenant by the view in force ("" without a
	// ring).
	Owners() func(tenant string) string
	// Clustered reports whether the node gossips, signs its hops and has
	// a second member in its view.
	Clustered() bool
	// Draining reports whether the node drains.
	Draining() bool
}

// Ledger is the router's fallback ledger of each tenant (a spill's
// admissions reach the node counting the tenant through it).
type Ledger interface {
	// Report sends what t's ledger holds now.
	Report(t *tenant.Tenant)
	// Send sends d, named, to the node counting t.
	Send(t *tenant.Tenant, d limiter.Delta)
}

// tenantOf is t's parts as package spill needs them.
func (l *Loop) tenantOf(t *tenant.Tenant) *spill.Tenant {
	c := t.Core()
	return &spill.Tenant{Name: t.Name, Limits: t.Limits, Lim: c.Lim, Holder: c.Spill, Queue: c.Queue,
		Ledger: ledger{l: l.Ledger, t: t}}
}

// ledger is t's fallback ledger as a spill reports it.
type ledger struct {
	l Ledger
	t *tenant.Tenant
}

func (l ledger) Report() bool {
	l.l.Report(l.t)
	return l.t.Core().Fb.Delivered()
}

func (l ledger) Share() *limiter.Tenant { return l.t.Core().Fb.Share() }

func (l ledger) Send(d limiter.Delta) { l.l.Send(l.t, d) }

// now is the node's clock in Unix ns.
func (l *Loop) now() int64 { return l.Node.Clock.Now().UnixNano() }

// Note lists t for the loop's next tick: its first request since the last
// tick.
func (l *Loop) Note(t *tenant.Tenant) {
	l.arrived.Add(t)
}

// Abandon leaves the tenant's spill of owner when a request this node
// forwarded to owner failed: it got here because the spill's budget
// stalled (Redis did not answer this node), and the owner does not answer
// either. The request goes to the fallback share; back on the budget once
// Redis answers, this node would admit on a window that knows nothing of
// what its share admitted. (An owner that is alive after all announces the
// spill again: this node rejoins once its share's admissions reached it,
// which charges them to the budget.)
func (l *Loop) Abandon(t *tenant.Tenant, owner string) {
	c := t.Peek()
	if c == nil {
		return // no core: no spill
	}
	if sp := c.Spill.Load(); l.Node.Abandon(sp, owner, c.Spill) {
		go l.leave(t, sp, "owner_unreachable")
	}
}

// leave stops serving a spill this node does not own (spill.Node's
// Leave).
func (l *Loop) leave(t *tenant.Tenant, sp *spill.Spill, reason string) bool {
	return l.Node.Leave(l.tenantOf(t), sp, reason)
}

// Reload gives the spills this node owns the tenants' new limits (a
// reload); the members take them with the next announcement.
func (l *Loop) Reload(st *tenant.State) {
	for _, t := range st.ByName {
		if sp := t.Spilled(); sp != nil && sp.Owner == l.Node.Self {
			sp.Budget.SetLimits(t.Limits, lease.Share)
		}
	}
}

// Edge is the spill this node serves the tenant on instead of forwarding
// to owner; nil when there is none, or while Redis does not answer this
// node (spill.Node's Usable).
func (l *Loop) Edge(t *tenant.Tenant, owner string) *spill.Spill {
	sp := t.Spilled()
	if !l.Node.Usable(sp, owner) {
		return nil
	}
	if !t.Spillable() {
		return nil // given a team or model limits since (a reload): its owner decides them
	}
	sp.Arrive()
	return sp
}

// CarriedEnded brings into a spill this node owns what ds report of calls
// admitted outside it (spill.Node's CarriedEnded).
func (l *Loop) CarriedEnded(t *tenant.Tenant, ds []limiter.Delta) {
	sp := t.Spilled()
	if sp == nil || sp.Owner != l.Node.Self {
		return
	}
	l.Node.CarriedEnded(sp, ds)
}

// View is the tenant's spillover as /tenants/{name} shows it.
func (l *Loop) View(t *tenant.Tenant) status.Spill {
	return l.Node.View(t.Spilled())
}
