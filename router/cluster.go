package router

import (
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/cluster"
	"github.com/ringgate/ringgate/router/internal/moves"
)

// View is what the router knows of the cluster (cluster.View): the node
// publishes one on every membership or ring change.
type View = cluster.View

// SetView publishes a new cluster view.
func (r *Router) SetView(v View) {
	nv := cluster.Build(v, r.node)
	if r.spills.Node.Owned() > 0 {
		// A spilled tenant this ring gives another owner: its spill ends
		// while this node still counts it, so the members' last reports
		// are in the state it hands over.
		r.spills.EndMovedBy(nv.Owner)
	}
	r.reloads.mu.Lock()
	old := r.view.Swap(nv)
	// Most views change only who is live, not the ring: each tenant's
	// owner is then what it was, and a node configured with 100 000
	// tenants does not look each one up again (nor, with no member gone,
	// at each one's slots).
	sameRing := old != nil && old.Ring() == nv.Ring()
	if !sameRing {
		r.trackOwnership(nv)
	}
	r.reloads.mu.Unlock()
	r.view.Changed()
	if !sameRing {
		r.fb.ReportTo(nv, r.state.Load().ByName)
	}
	r.moving.departed.Note(old, nv)
	if old == nil || cluster.MembersLeft(old, nv) {
		for _, t := range r.state.Load().ByName {
			r.moves.DropGoneSlots(t, nv)
		}
	}
	r.viewMetrics()
}

// viewMetrics sets the ring and membership gauges from the view.
func (r *Router) viewMetrics() {
	cv := r.adminView().Cluster()
	active, draining := 0, 0
	for _, mb := range cv.Members {
		if mb.State == "draining" {
			draining++
		} else {
			active++
		}
	}
	r.metrics.ViewChanged(cv.RingVersion, active, draining, cv.ConfigsDiffer)
}

// trackOwnership (under reloads.mu) records, per tenant, until when this node owned it
// (ownedNow while it does): a node that just handed a tenant over still
// holds its state, one that never owned it holds nothing worth enforcing on.
func (r *Router) trackOwnership(v *cluster.Lookup) {
	now := r.clock()
	if r.clustered && (v == nil || v.Ring().Len() == 0) {
		// A cluster node without a ring (it has not joined yet) owns
		// nothing: marking every tenant owned would let it enforce hops
		// on empty windows as a "recent owner" once its ring arrives.
		return
	}
	for name, t := range r.state.Load().ByName {
		if o := v.Owner(name); o == "" || o == r.node {
			t.OwnedUntil.Store(ownedNow)
		} else if t.OwnedUntil.CompareAndSwap(ownedNow, now) {
			if c := t.Peek(); c != nil {
				c.Queue.Kick() // those waiting here are decided by the new owner
			}
		}
	}
}

// ownedNow marks a tenant this node owns.
const ownedNow = moves.OwnedNow

// Admit admits on lim; owned: the limiter of an entity this node counts.
// While members that cannot reach this node admit their fallback shares
// of what it owns (limit / live each, rounded down), it keeps to what they
// leave, so that together they stay within the limit (an asymmetric
// partition: the owner alive in gossip and serving its own clients, its
// HTTP out of the others' reach, their reports with it). A tenant's room
// calls it as package levels does (levels.Node), directly. It writes the
// ticket and decision to tk and d, where the caller keeps them: returning
// the two large values would copy them on every request.
func (n *levelsNode) Admit(lim *limiter.Tenant, owned bool, now, cost int64, tk *limiter.Ticket, d *limiter.Decision) {
	if owned {
		if v := n.view.Load(); v != nil && v.CutBy() > 0 {
			*tk, *d = lim.AdmitBeside(now, cost, int64(v.CutBy()), int64(v.LiveMembers()))
			return
		}
	}
	lim.AdmitTo(now, cost, tk, d)
}
