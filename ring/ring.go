// Package ring maps tenants to the node that owns them.
//
// It builds a consistent-hash ring (github.com/buraksezer/consistent, bounded
// loads) over the names of the live, active gateway nodes and answers "which
// node owns this tenant?" without locks or allocations. Every ring carries a
// version; a Table holds the current ring, rebuilds it when the member set
// changes and reports each change (from, to) in version order.
//
// The package knows nothing of gossip, HTTP, limits or Redis: the caller feeds
// it member names and acts on the rings it hands back. Two nodes that feed the
// same member set get the same owners, whatever the order of the names.
package ring

import (
	"slices"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
)

// Ring parameters. Every node of a cluster must use the same values, or the
// nodes will disagree about owners.
const (
	// PartitionCount is the number of partitions tenants hash into
	// (xxhash64(tenant) % PartitionCount), the unit MovedPartitions counts.
	PartitionCount = 271
	// ReplicationFactor is the number of virtual nodes per member.
	ReplicationFactor = 20
	// Load bounds a member's share at Load × the average.
	Load = 1.25
)

// Ring is an immutable consistent-hash ring of member names. Its methods are
// safe for concurrent use, and also on a nil *Ring, which acts as an empty
// ring of version 0.
type Ring struct {
	version uint64
	members []string // sorted, no duplicates, no empty names
	// owners[p] is the owner of partition p; nil for an empty ring.
	owners []string
	// pins place some names by another name's key (Pins).
	pins Pins
}

// Pins place a name on the ring by another key: a team's tenants are
// pinned to their team, so that one node owns the team and all its
// tenants and checks every level of their limits in RAM. A name not in
// Pins is placed by itself. A Pins value is never changed once a ring
// holds it.
type Pins map[string]string

// key is the ring key of name.
func (r *Ring) key(name string) string {
	if r != nil && r.pins != nil {
		if k, ok := r.pins[name]; ok {
			return k
		}
	}
	return name
}

// member adapts a name to consistent.Member.
type member string

func (m member) String() string { return string(m) }

// hasher adapts xxhash to consistent.Hasher. Owner relies on the library
// computing partitions as hasher.Sum64(key) % PartitionCount with this hasher.
type hasher struct{}

func (hasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

var config = consistent.Config{
	Hasher:            hasher{},
	PartitionCount:    PartitionCount,
	ReplicationFactor: ReplicationFactor,
	Load:              Load,
}

// New builds a ring of the given version over members. Names are
// deduplicated and sorted; empty names are ignored. With no members the ring
// is empty and Owner reports no owner. The caller's slice is not kept.
//
// A build costs tens of microseconds to a few milliseconds (see
// BenchmarkBuild); do it off the request path, as Table does.
func New(version uint64, members []string) *Ring {
	return build(version, normalize(members))
}

// build builds a ring from an already normalized member list, which it keeps.
func build(version uint64, names []string) *Ring {
	r := &Ring{version: version, members: names}
	if len(names) == 0 {
		// Never hand the library an empty non-nil slice, and never ask an
		// empty ring for owners (LocateKey/GetPartitionOwner return nil).
		return r
	}
	ms := make([]consistent.Member, len(names))
	for i, n := range names {
		ms[i] = member(n)
	}
	c := consistent.New(ms, config)
	owners := make([]string, PartitionCount)
	for p := range owners {
		m := c.GetPartitionOwner(p)
		if m == nil {
			// Cannot happen with a non-empty member set; fail loudly
			// rather than route tenants to "".
			panic("ring: consistent left a partition without an owner")
		}
		// Point at our own copy of the name so the table shares storage
		// with members.
		n := m.String()
		i, ok := slices.BinarySearch(names, n)
		if !ok {
			panic("ring: consistent returned an unknown member " + n)
		}
		owners[p] = names[i]
	}
	r.owners = owners
	return r
}

// normalize returns a sorted copy of names without duplicates or empty names,
// or nil if none remain.
func normalize(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if n != "" {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil
	}
	slices.Sort(out)
	return slices.Clip(slices.Compact(out))
}

// Version returns the ring's version (0 for a nil ring).
func (r *Ring) Version() uint64 {
	if r == nil {
		return 0
	}
	return r.version
}

// Members returns a sorted copy of the member names (nil if empty).
func (r *Ring) Members() []string {
	if r == nil || len(r.members) == 0 {
		return nil
	}
	return slices.Clone(r.members)
}

// Len returns the number of members.
func (r *Ring) Len() int {
	if r == nil {
		return 0
	}
	return len(r.members)
}

// Has reports whether member is on the ring.
func (r *Ring) Has(member string) bool {
	if r == nil {
		return false
	}
	_, ok := slices.BinarySearch(r.members, member)
	return ok
}

// Owner returns the name of the node that owns tenant, or "", false if the
// ring is empty. It takes no locks and allocates nothing.
func (r *Ring) Owner(tenant string) (string, bool) {
	if r == nil || r.owners == nil {
		return "", false
	}
	return r.owners[partition(r.key(tenant))], true
}

// partition computes the partition of key exactly as
// consistent.FindPartitionID does with our hasher, without converting the
// string to a []byte.
func partition(key string) uint64 {
	return xxhash.Sum64String(key) % PartitionCount
}

// owner returns the owner of partition p, "" on an empty or nil ring.
func (r *Ring) owner(p int) string {
	if r == nil || r.owners == nil {
		return ""
	}
	return r.owners[p]
}

// sameMembers reports whether r holds exactly the normalized names.
func (r *Ring) sameMembers(names []string) bool {
	if r == nil {
		return len(names) == 0
	}
	return slices.Equal(r.members, names)
}

// Moved returns the tenants whose owner differs between from and to, in the
// order given. A nil or empty ring owns nothing (owner ""), so with a nil
// from every tenant moved, unless to is empty too. It returns nil if none
// moved.
func Moved(from, to *Ring, tenants []string) []string {
	var out []string
	for _, t := range tenants {
		if from.owner(int(partition(from.key(t)))) != to.owner(int(partition(to.key(t)))) {
			out = append(out, t)
		}
	}
	return out
}

// MovedPartitions returns how many of the PartitionCount partitions changed
// owner between from and to (nil or empty rings own nothing).
func MovedPartitions(from, to *Ring) int {
	n := 0
	for p := range PartitionCount {
		if from.owner(p) != to.owner(p) {
			n++
		}
	}
	return n
}

// samePins reports whether r places names by p.
func (r *Ring) samePins(p Pins) bool {
	var have Pins
	if r != nil {
		have = r.pins
	}
	if len(have) != len(p) {
		return false
	}
	for k, v := range p {
		if w, ok := have[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Hash identifies the ring's member set: two nodes whose rings hold the same
// members have the same hash (and the same owners), whatever their local
// version counters say. Snapshots carry it to say which ring they were
// handed over for. 0 for an empty ring.
func (r *Ring) Hash() uint64 {
	if r == nil || len(r.members) == 0 {
		return 0
	}
	d := xxhash.New()
	for _, m := range r.members {
		_, _ = d.WriteString(m)
		_, _ = d.Write([]byte{0})
	}
	return d.Sum64()
}

// WithPins returns a copy of r (same version and owners) that places names
// by p: for rings built outside a Table.
func (r *Ring) WithPins(p Pins) *Ring {
	if r == nil {
		r = &Ring{}
	}
	c := *r
	c.pins = p
	return &c
}

// Pins are the pins r places names by (nil: none).
func (r *Ring) Pins() Pins {
	if r == nil {
		return nil
	}
	return r.pins
}

// Hash identifies the pins: equal pins hash the same whatever the map's
// order; 0 for none.
func (p Pins) Hash() uint64 {
	if len(p) == 0 {
		return 0
	}
	names := make([]string, 0, len(p))
	for n := range p {
		names = append(names, n)
	}
	slices.Sort(names)
	d := xxhash.New()
	for _, n := range names {
		_, _ = d.WriteString(n)
		_, _ = d.Write([]byte{0})
		_, _ = d.WriteString(p[n])
		_, _ = d.Write([]byte{0})
	}
	if h := d.Sum64(); h != 0 {
		return h
	}
	return 1
}
