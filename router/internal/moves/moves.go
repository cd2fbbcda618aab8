// Package moves is this node's part in moving tenants between nodes: it
// implements package handoff's Tenants and Peers over the node's tenants
// (holding a tenant's requests while this node, its new owner, loads its
// state; freezing and thawing its limiter; asking a previous owner for
// state over the signed peer path), and it delivers the deltas of calls
// that end at an edge to the node that counts their tenant, holding those
// that arrive before the tenant is taken over. The protocol that decides
// when to hold, freeze and import is package handoff's.
//
// It owns the deltas held and retried, the list of changed tenants and the
// node's hand-over and take-back hooks. It knows nothing of HTTP answers,
// calls or the router: the cluster view comes through Cluster and View,
// the signed transport through Caller, and what a delta applied means to a
// spill through Config.Applied.
package moves

import (
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ringgate/ringgate/handoff"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/ring"
	"github.com/ringgate/ringgate/router/internal/away"
	"github.com/ringgate/ringgate/router/internal/deltaid"
	"github.com/ringgate/ringgate/router/internal/metrics"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// OwnedNow is tenant.Tenant.OwnedUntil of a tenant this node owns.
const OwnedNow = math.MaxInt64

// View is one cluster view. Its methods answer for a nil view too (no view
// yet: no ring, no members).
type View interface {
	// Owner is the tenant's owner by the view's ring, "" when there is no
	// ring to ask (a standalone node, or one that has not joined yet).
	Owner(name string) string
	// Addr is the member's HTTP address; listed says whether the view
	// lists node at all.
	Addr(node string) (addr string, listed bool)
	// Names are the members listed, this node included, sorted; shared.
	Names() []string
}

// Cluster is this node's cluster view as it changes.
type Cluster interface {
	// View is the view in force.
	View() View
	// Await waits until ok holds of the view in force, looking again at
	// each change, for at most wait; it returns the view it looked at
	// last.
	Await(wait time.Duration, ok func(View) bool) View
	// Departed reports whether node was a member of this node's view and
	// left it (not one this node has not seen yet).
	Departed(node string) bool
}

// Caller is the signed transport to the peers (a hop).
type Caller interface {
	// Call POSTs msg as JSON to path on the peer to (at addr), signed
	// under v as its hops-th hop, and returns the answer's status and
	// body.
	Call(v View, addr, to, path string, msg any, hops int, timeout time.Duration) (int, []byte, error)
	// Signed reports whether this node signs peer requests (a cluster
	// secret is set): without, nothing travels between nodes.
	Signed() bool
}

// Config is a Node's.
type Config struct {
	Self      string // this node's name
	Clustered bool   // the node gossips: until it holds a ring it owns nothing
	State     *atomic.Pointer[tenant.State]
	Cores     *tenant.Cores
	// Reloads is the lock a reload holds while it swaps the state.
	Reloads sync.Locker
	Clock   clockwork.Clock
	Log     *slog.Logger
	Metrics *metrics.Metrics
	IDs     *deltaid.IDs // names this node's deltas, skips ones applied twice
	Cluster Cluster
	Peers   Caller
	// Quit is closed when the node closes: deliveries retried end.
	Quit <-chan struct{}
	// MaxHops bounds how often deltas are passed on; CatchUp is how long
	// an address this node's gossip does not list yet is waited for.
	MaxHops int
	CatchUp time.Duration
	// Ringless reports whether this is a cluster node without a ring yet
	// (a slow join).
	Ringless func() bool
	// Deciding is handoff.Tenants.Deciding.
	Deciding func() bool
	// Applied hears of the deltas applied to the tenant's windows here.
	Applied func(t *tenant.Tenant, ds []limiter.Delta)
}

// Node is this node's tenants and peers as package handoff moves them
// (handoff.Tenants, handoff.Peers), and the deltas it delivers.
type Node struct {
	cfg     Config
	held    away.Held    // deltas for tenants not taken over yet
	retries away.Retries // the reports being sent again (Send)
	// changed are the tenants whose owner limiter changed since it was
	// last found empty, for the periodic save (Changed).
	changedMu sync.Mutex
	changed   []string
	// handOver answers a peer asking for tenants' state.
	handOver atomic.Pointer[func(asker string, tenants []string) []handoff.Reply]
	// takeBack takes a tenant back from a node it bounced with
	// (handoff.Mover.TakeBack).
	takeBack atomic.Pointer[func(tenant, other string) bool]
}

var _ handoff.Tenants = (*Node)(nil)
var _ handoff.Peers = (*Node)(nil)

// New makes a Node.
func New(c Config) *Node { return &Node{cfg: c} }

// clock is the node's clock in Unix nanoseconds.
func (n *Node) clock() int64 { return n.cfg.Clock.Now().UnixNano() }

// tenant is the named tenant in the state in force, nil if unknown.
func (n *Node) tenant(name string) *tenant.Tenant { return n.cfg.State.Load().ByName[name] }

// Hold makes the tenant's requests wait (at most wait) before their first
// decision here, until Release: a new owner loads the tenant's state first
// rather than admit blind. It reports false for an unknown tenant.
func (n *Node) Hold(name string, wait time.Duration) bool {
	// Under the reloads' lock: a reload copies the gate to the new
	// state's tenant, and must not copy one that is being swapped (a gate
	// left closed on the new struct would hold the tenant for good).
	n.cfg.Reloads.Lock()
	defer n.cfg.Reloads.Unlock()
	t := n.tenant(name)
	if t == nil {
		return false
	}
	g := tenant.NewGate(wait, n.cfg.Clock)
	if old := t.Gate.Swap(g); old != nil {
		old.Release()
	}
	return true
}

// Release lets the tenant's held requests through, after applying the
// deltas that reached this node for the tenant before it took the tenant
// over (see Receive). The node calls it once it has loaded the tenant's
// state, or, without snapshots, once its ring makes it the owner.
func (n *Node) Release(name string) {
	n.cfg.Reloads.Lock()
	defer n.cfg.Reloads.Unlock()
	t := n.tenant(name)
	if t == nil {
		return
	}
	var g *tenant.Gate
	// Still frozen for another node (a take-back that got nothing: the
	// tenant stays there): the deltas go on to it, the node that counts
	// them; applied to the frozen windows here they would count nowhere.
	passOn := map[string][]limiter.Delta{}
	n.held.Release(name, func(ds []away.Kept) {
		g = t.Gate.Swap(nil)
		if len(ds) == 0 {
			return
		}
		now, lim := n.clock(), t.Core().Lim
		moved := lim.MovedTo() != "" && lim.MovedTo() != n.cfg.Self
		for _, h := range ds {
			switch {
			case now-h.At >= int64(lim.Window()):
			case moved:
				passOn[h.From] = append(passOn[h.From], h.Delta)
			default:
				lim.ApplyFrom(now, h.From, h.Delta)
			}
		}
	})
	for from, pds := range passOn {
		n.Send(t, from, pds, 1)
	}
	n.DropGoneSlots(t, n.cfg.Cluster.View())
	if g != nil {
		g.Release()
	}
	if c := t.Peek(); c != nil {
		c.Queue.Kick()
	}
}

// DropGoneSlots frees the tenant's slots of calls that ran on nodes no
// longer members of v: declared dead (or left), their calls died with
// them, so their slots must not wait for the slot TTL.
func (n *Node) DropGoneSlots(t *tenant.Tenant, v View) {
	c := t.Peek()
	if len(v.Names()) == 0 || c == nil {
		return
	}
	for _, node := range c.Lim.AwayNodes() {
		if _, member := v.Addr(node); !member {
			if freed := c.Lim.DropNode(n.clock(), node); freed > 0 {
				n.cfg.Log.Info("handoff", "phase", "slots_dropped", "tenant", t.Name, "node", node, "slots", freed)
			}
		}
	}
}

// SweepHeld passes on the deltas that have waited away.HeldFor at this
// node for a tenant it did not take over (the tenant went past this node:
// a join coalesced with the next change, say). Dropped, they would leave
// their slots counted at the tenant's owner until slot_ttl.
func (n *Node) SweepHeld() {
	now := n.clock()
	if n.cfg.Ringless() {
		// No ring yet (a slow join): the node that counts the tenants is
		// not known, and the handoff this node's first ring starts may
		// import windows over what would be applied here (counts).
		return
	}
	st := n.cfg.State.Load()
	due := n.held.Due(now, func(name string) (gone, taking bool) {
		t := st.ByName[name]
		return t == nil, t != nil && t.Gate.Load() != nil
	})
	for name, hs := range due {
		t := st.ByName[name]
		byFrom := map[string][]limiter.Delta{}
		for _, h := range hs {
			byFrom[h.From] = append(byFrom[h.From], h.Delta)
		}
		for from, ds := range byFrom {
			if dest, _ := n.dest(t); dest == "" || dest == n.cfg.Self {
				now := n.clock()
				for _, d := range ds {
					t.Core().Lim.ApplyFrom(now, from, d)
				}
				continue
			}
			n.cfg.Log.Info("handoff", "phase", "held_deltas_passed_on", "tenant", t.Name, "deltas", len(ds))
			n.Send(t, from, ds, 1)
		}
	}
}

// Held reports whether the tenant's requests are held for a handoff.
func (n *Node) Held(name string) bool {
	t := n.tenant(name)
	return t != nil && t.Gate.Load() != nil
}

// Limiter is the tenant's owner limiter (nil for an unknown tenant), for the
// node to export and import its state.
func (n *Node) Limiter(name string) *limiter.Tenant {
	if t := n.tenant(name); t != nil {
		return t.Core().Lim
	}
	return nil
}

// Counted is the tenant's owner limiter if this node ever counted the
// tenant (its core was made), else nil.
func (n *Node) Counted(name string) *limiter.Tenant {
	if t := n.tenant(name); t != nil {
		if c := t.Peek(); c != nil {
			return c.Lim
		}
	}
	return nil
}

// MovedTo is the node the tenant was handed to ("" if none, or unknown),
// without making its core.
func (n *Node) MovedTo(name string) string {
	t := n.tenant(name)
	if t == nil {
		return ""
	}
	return t.MovedTo()
}

// Thaw makes this node count the tenant again (limiter.Tenant.Thaw),
// without making its core.
func (n *Node) Thaw(name string) {
	if t := n.tenant(name); t != nil {
		n.cfg.Cores.Thaw(t)
	}
}

// Freeze hands the tenant over to the node to (limiter.Tenant.Freeze)
// and returns its state; false for an unknown tenant. A tenant never
// counted here is handed empty without making its core.
func (n *Node) Freeze(name string, now int64, to string) (limiter.State, bool) {
	t := n.tenant(name)
	if t == nil {
		return limiter.State{}, false
	}
	return n.cfg.Cores.Freeze(t, now, to), true
}

// Owns reports whether this node's ring makes it the tenant's owner (a
// standalone node owns everything).
func (n *Node) Owns(name string) bool {
	o := n.cfg.Cluster.View().Owner(name)
	return o == "" || o == n.cfg.Self
}

// counts reports whether deltas from node from ("": this one) for the
// tenant are this node's to apply now. A peer's deltas reach a node only
// in a cluster, so a node with no ring yet (it has just joined) does not
// own the tenant for them, whatever Owns says standalone: the previous
// owner may have handed the tenant to it already, and the handoff that
// this node's first ring starts imports windows that a release applied
// now would be lost under (the slot it frees held for good).
func (n *Node) counts(name, from string) bool {
	o := n.cfg.Cluster.View().Owner(name)
	return o == n.cfg.Self || o == "" && (from == "" || !n.cfg.Clustered)
}

// OwnedWithin reports whether this node owns the tenant or owned it within
// the last d (handoff.Tenants).
func (n *Node) OwnedWithin(name string, d time.Duration) bool {
	t := n.tenant(name)
	if t == nil {
		return false
	}
	until := t.OwnedUntil.Load()
	return until == OwnedNow || until > n.clock()-int64(d)
}

// Deciding reports whether this node decides for the tenants it owns now
// (handoff.Tenants).
func (n *Node) Deciding() bool { return n.cfg.Deciding() }

// Names are the configured tenants and their teams' and model limits'
// entities (handoff.Tenants), sorted; shared, not to be changed.
func (n *Node) Names() []string { return n.cfg.State.Load().Names }

// Pins place every tenant's levels of limits on the ring by the top of its
// hierarchy (its team, else itself): the ring the node builds must hold
// them.
func (n *Node) Pins() ring.Pins { return n.cfg.State.Load().Pins }

// Changed lists, once each, the tenants whose owner limiter changed since
// it was made or last found empty (handoff.Tenants).
func (n *Node) Changed() []string {
	n.changedMu.Lock()
	defer n.changedMu.Unlock()
	out := n.changed
	n.changed = nil
	return out
}

// NoteChanged records the tenant's first change since it was last found
// empty (tenant.Hooks.Changed), for Changed.
func (n *Node) NoteChanged(name string) {
	n.changedMu.Lock()
	n.changed = append(n.changed, name)
	n.changedMu.Unlock()
}
