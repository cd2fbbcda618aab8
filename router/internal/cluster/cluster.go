// Package cluster owns this node's view of the cluster: the ring that
// says who owns each tenant, the live members with their HTTP addresses,
// the view in force with the wait for it to change, and the record of the
// members that left it. It knows nothing of tenants, limits, spills or
// requests: what follows from a new view (each tenant's owner recorded,
// spills ended, metrics) is the router's.
package cluster

import (
	"sort"
	"sync"

	"github.com/ringgate/ringgate/ring"
	"github.com/ringgate/ringgate/router/internal/status"
)

// Member is one node as the view lists it (and the admin API shows it).
type Member = status.Member

// View is what the router knows of the cluster: the ring that says who owns
// each tenant, and the live members with their HTTP addresses. The node
// publishes a new View on every membership or ring change; requests read it
// through one atomic pointer.
type View struct {
	Ring    *ring.Ring
	Members []Member // live members, draining ones included, self included
}

// Lookup is a View with lookups prepared. It is not changed once built.
type Lookup struct {
	ring    *ring.Ring
	members []Member
	addrs   map[string]string
	names   []string // the members' names (Names)
	live    int
	// cutBy counts the members that cannot reach this node and admit
	// fallback shares of its tenants meanwhile: it keeps its own
	// admissions to what their shares leave of each limit.
	cutBy int
}

// Build prepares v's lookups for the node named self.
func Build(v View, self string) *Lookup {
	nv := &Lookup{ring: v.Ring, addrs: make(map[string]string, len(v.Members)), names: make([]string, 0, len(v.Members))}
	nv.members = append([]Member(nil), v.Members...)
	sort.Slice(nv.members, func(i, j int) bool { return nv.members[i].Name < nv.members[j].Name })
	for _, m := range nv.members {
		nv.addrs[m.Name] = m.Addr
		nv.names = append(nv.names, m.Name)
		if m.CannotReachSelf && m.Name != self {
			nv.cutBy++
		}
	}
	nv.live = len(nv.members)
	if nv.live == 0 {
		nv.live = 1
	}
	return nv
}

// Owner reports the tenant's owner, or "" when there is no ring to ask (a
// standalone node, or one that has not joined yet): then this node enforces.
func (v *Lookup) Owner(tenant string) string {
	if v == nil || v.ring == nil {
		return ""
	}
	o, _ := v.ring.Owner(tenant)
	return o
}

// LiveMembers is how many members share the cluster's budgets (1 without
// a view).
func (v *Lookup) LiveMembers() int {
	if v == nil {
		return 1
	}
	return v.live
}

// Version is the ring's version (0 without a ring).
func (v *Lookup) Version() uint64 {
	if v == nil || v.ring == nil {
		return 0
	}
	return v.ring.Version()
}

// Addr is node's HTTP address, and whether node is a member.
func (v *Lookup) Addr(node string) (string, bool) {
	if v == nil {
		return "", false
	}
	a, ok := v.addrs[node]
	return a, ok
}

// Names are the members' names, sorted.
func (v *Lookup) Names() []string {
	if v == nil {
		return nil
	}
	return v.names
}

// Ring is the ring the view was built from (nil: none yet).
func (v *Lookup) Ring() *ring.Ring {
	if v == nil {
		return nil
	}
	return v.ring
}

// Members are the live members, sorted by name; callers do not change them.
func (v *Lookup) Members() []Member {
	if v == nil {
		return nil
	}
	return v.members
}

// Addrs are the members' HTTP addresses by name; callers do not change them.
func (v *Lookup) Addrs() map[string]string {
	if v == nil {
		return nil
	}
	return v.addrs
}

// CutBy counts the members that cannot reach this node and admit fallback
// shares of its tenants meanwhile.
func (v *Lookup) CutBy() int {
	if v == nil {
		return 0
	}
	return v.cutBy
}

// MembersLeft reports whether a member of old is not in nv.
func MembersLeft(old, nv *Lookup) bool {
	for name := range old.addrs {
		if _, ok := nv.addrs[name]; !ok {
			return true
		}
	}
	return false
}

// Departed are the members that left this node's view (and have not
// come back): a report from one frees its slots.
type Departed struct {
	mu sync.Mutex
	at map[string]bool
}

// Note records the members old had and nv has not (they left: drained,
// or found dead), and forgets those nv has again.
func (d *Departed) Note(old, nv *Lookup) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.at == nil {
		d.at = make(map[string]bool)
	}
	for name := range nv.addrs {
		delete(d.at, name)
	}
	if old == nil {
		return
	}
	for name := range old.addrs {
		if _, ok := nv.addrs[name]; !ok && len(d.at) < 4096 {
			d.at[name] = true
		}
	}
}

// Has reports whether node was a member of this node's view and left it
// (not one this node has not seen yet: a node that just joined may hear
// of a member after that member's reports).
func (d *Departed) Has(node string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at[node]
}
