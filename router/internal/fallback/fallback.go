// Package fallback owns an edge's fallback episodes: the strict share a
// node enforces for a tenant whose owner it cannot reach (limit / live
// members), the seed that charges the share with what the owner had
// admitted, the episode's start and end and their log lines, the owners
// the node names as unreachable, and the reports of what the share
// admitted to the node that counts the tenant now. The ledger those
// reports come from, and the owners' bookkeeping, are package away's.
//
// It knows nothing of HTTP serving, calls or the router; of an answer it
// reads only the headers that say what the tenant used. The node's clock,
// window and view come as functions (Config), the deltas travel through
// Mover (package moves), and a tenant's snapshot, for the seed, through
// the function the node gives (SetSeed).
package fallback

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/away"
	"github.com/ringgate/ringgate/router/internal/cluster"
	"github.com/ringgate/ringgate/router/internal/deltaid"
	"github.com/ringgate/ringgate/router/internal/metrics"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// Mover delivers deltas to the node that counts a tenant now (package
// moves' Node).
type Mover interface {
	// Report sends one delta, in the background.
	Report(t *tenant.Tenant, d limiter.Delta)
	// Deliver gives ds, deltas of calls on node from ("": this one), to
	// the node that counts t now and says whether it took them.
	Deliver(t *tenant.Tenant, from string, ds []limiter.Delta, forwarded int) error
}

// Config is what an Edge reads of its node.
type Config struct {
	Self    string                 // this node's name
	Clock   func() int64           // the node's clock (Unix ns)
	Window  func() time.Duration   // the window in force
	View    func() *cluster.Lookup // the cluster view in force (nil: none yet)
	IDs     *deltaid.IDs           // names this node's deltas
	Moves   Mover
	Metrics *metrics.Metrics
	Log     *slog.Logger
}

// Edge is this node's fallback episodes.
type Edge struct {
	cfg Config
	// unreach: the owners this node admits fallback shares for, which
	// its gossip metadata names (package away).
	unreach away.Unreachables
	// seed loads a tenant's last snapshot (nil without Redis).
	seed atomic.Pointer[func(tenant string) (limiter.State, bool)]
}

// New makes a node's Edge.
func New(c Config) *Edge { return &Edge{cfg: c} }

// SetSeed gives the edge a source of a tenant's last known state (the
// node's snapshot store) for seeding fallback shares.
func (e *Edge) SetSeed(seed func(tenant string) (limiter.State, bool)) {
	e.seed.Store(&seed)
}

// SetCannotReachHook gives the edge the node's way to say which owners it
// cannot reach (gossip metadata); called one call at a time, with the
// sorted names, whenever they change (away.Unreachables).
func (e *Edge) SetCannotReachHook(f func(owners []string)) {
	e.unreach.SetHook(f)
}

// noteFallback records that this node fell back on owner now, for t.
func (e *Edge) noteFallback(t *tenant.Tenant, owner string) {
	e.unreach.Note(owner, t.Core().Fb, (*awayNode)(e))
}

// awayNode is what away.Unreachables reads of the node.
type awayNode Edge

func (n *awayNode) Now() int64 { return n.cfg.Clock() }

func (n *awayNode) Window() time.Duration { return n.cfg.Window() }

// Left reports whether owner has left the view.
func (n *awayNode) Left(owner string) bool {
	v := n.cfg.View()
	return v != nil && v.Addrs()[owner] == ""
}
