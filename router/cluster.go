package router

import (
	"sort"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/ring"
	"github.com/ringgate/ringgate/router/internal/moves"
)

// View is what the router knows of the cluster: the ring that says who owns
// each tenant, and the live members with their HTTP addresses. The node
// publishes a new View on every membership or ring change; requests read it
// through one atomic pointer.
type View struct {
	Ring    *ring.Ring
	Members []Member // live members, draining ones included, self included
}

// view is a View with lookups prepared.
type view struct {
	ring    *ring.Ring
	members []Member
	addrs   map[string]string
	names   []string // the members' names (Names)
	live    int
	// cutBy counts the members that cannot reach this node and admit
	// fallback shares of its tenants meanwhile: it keeps its own
	// admissions to what their shares leave of each limit (levelsNode.Admit).
	cutBy int
}

// SetView publishes a new cluster view.
func (r *Router) SetView(v View) {
	nv := &view{ring: v.Ring, addrs: make(map[string]string, len(v.Members)), names: make([]string, 0, len(v.Members))}
	nv.members = append([]Member(nil), v.Members...)
	sort.Slice(nv.members, func(i, j int) bool { return nv.members[i].Name < nv.members[j].Name })
	for _, m := range nv.members {
		nv.addrs[m.Name] = m.Addr
		nv.names = append(nv.names, m.Name)
		if m.CannotReachSelf && m.Name != r.node {
			nv.cutBy++
		}
	}
	nv.live = len(nv.members)
	if nv.live == 0 {
		nv.live = 1
	}
	if r.spills.Node.Owned() > 0 {
		// A spilled tenant this ring gives another owner: its spill ends
		// while this node still counts it, so the members' last reports
		// are in the state it hands over.
		r.spills.EndMovedBy(nv.owner)
	}
	r.reloads.mu.Lock()
	old := r.view.Swap(nv)
	// Most views change only who is live, not the ring: each tenant's
	// owner is then what it was, and a node configured with 100 000
	// tenants does not look each one up again (nor, with no member gone,
	// at each one's slots).
	sameRing := old != nil && old.ring == nv.ring
	if !sameRing {
		r.trackOwnership(nv)
	}
	r.reloads.mu.Unlock()
	r.view.changed()
	if !sameRing {
		r.reportFallbacksTo(nv)
	}
	r.noteDeparted(old, nv)
	if old == nil || membersLeft(old, nv) {
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

// noteDeparted records the members old had and nv has not (they left:
// drained, or found dead), and forgets those nv has again.
func (r *Router) noteDeparted(old, nv *view) {
	r.moving.departed.mu.Lock()
	defer r.moving.departed.mu.Unlock()
	if r.moving.departed.at == nil {
		r.moving.departed.at = make(map[string]bool)
	}
	for name := range nv.addrs {
		delete(r.moving.departed.at, name)
	}
	if old == nil {
		return
	}
	for name := range old.addrs {
		if _, ok := nv.addrs[name]; !ok && len(r.moving.departed.at) < 4096 {
			r.moving.departed.at[name] = true
		}
	}
}

// hasDeparted reports whether node was a member of this node's view and
// left it (not one this node has not seen yet: a node that just joined
// may hear of a member after that member's reports).
func (r *Router) hasDeparted(node string) bool {
	r.moving.departed.mu.Lock()
	defer r.moving.departed.mu.Unlock()
	return r.moving.departed.at[node]
}

// membersLeft reports whether a member of old is not in nv.
func membersLeft(old, nv *view) bool {
	for name := range old.addrs {
		if _, ok := nv.addrs[name]; !ok {
			return true
		}
	}
	return false
}

// trackOwnership (under reloads.mu) records, per tenant, until when this node owned it
// (ownedNow while it does): a node that just handed a tenant over still
// holds its state, one that never owned it holds nothing worth enforcing on.
func (r *Router) trackOwnership(v *view) {
	now := r.clock()
	if r.clustered && (v == nil || v.ring.Len() == 0) {
		// A cluster node without a ring (it has not joined yet) owns
		// nothing: marking every tenant owned would let it enforce hops
		// on empty windows as a "recent owner" once its ring arrives.
		return
	}
	for name, t := range r.state.Load().ByName {
		if o := v.owner(name); o == "" || o == r.node {
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

// owner reports the tenant's owner, or "" when there is no ring to ask (a
// standalone node, or one that has not joined yet): then this node enforces.
func (v *view) owner(tenant string) string {
	if v == nil || v.ring == nil {
		return ""
	}
	o, _ := v.ring.Owner(tenant)
	return o
}

// liveMembers is how many members share the cluster's budgets (1 without
// a view).
func (v *view) liveMembers() int {
	if v == nil {
		return 1
	}
	return v.live
}

func (v *view) version() uint64 {
	if v == nil || v.ring == nil {
		return 0
	}
	return v.ring.Version()
}

// Admit admits on lim; owned: the limiter of an entity this node counts.
// While members that cannot reach this node admit their fallback shares
// of what it owns (limit / live each, rounded down), it keeps to what they
// leave, so that together they stay within the limit (an asymmetric
// partition: the owner alive in gossip and serving its own clients, its
// HTTP out of the others' reach, their reports with it). A tenant's room
// calls it as package levels does (levels.Node), directly: a wrapper
// returning its two large results would copy them again on every request.
func (n *levelsNode) Admit(lim *limiter.Tenant, owned bool, now, cost int64) (limiter.Ticket, limiter.Decision) {
	if owned {
		if v := n.view.Load(); v != nil && v.cutBy > 0 {
			return lim.AdmitBeside(now, cost, int64(v.cutBy), int64(v.live))
		}
	}
	return lim.Admit(now, cost)
}
