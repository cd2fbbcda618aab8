package spill

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/status"
)

// Node is this node's side of every spill: who it is, its clock, the
// leaser the budgets are leased from, the cluster it tells, and the
// switch's state. The router sets the exported fields once, before any
// spill.
type Node struct {
	Self   string
	Clock  clockwork.Clock // the node's: the spills' time and their waits
	Leaser *lease.Leaser
	Log    *slog.Logger
	// Live is how many members share a budget.
	Live func() int
	// Limits are the limits in force: a budget's window and slot TTL.
	Limits func() config.Limits
	// Peers is this node's view now, for an announcement.
	Peers Peers
	// Phase counts a spill's phase (the spillover metric).
	Phase func(phase string)
	// EndWait bounds how long a request on the owner waits for a spill
	// that is ending to end (its members told, its window fenced, its
	// ledger reported: each bounded), to be decided on the unsealed
	// limiter rather than refused with a 503.
	EndWait time.Duration

	retryAt atomic.Int64 // no spillover switch before
	owned   atomic.Int32 // spills this node owns
	// Spills is the tenants with a spill, owned or served here (Holder):
	// while there are none the loop looks only at the tenants that had
	// requests (Arrivals).
	Spills atomic.Int64
}

// Arrivals are the tenants that had a request since the spillover loop's
// last tick.
type Arrivals[T any] struct {
	mu   sync.Mutex
	list []T
}

// Add lists t for the loop's next tick.
func (a *Arrivals[T]) Add(t T) {
	a.mu.Lock()
	a.list = append(a.list, t)
	a.mu.Unlock()
}

// Take is the tenants listed since the last Take.
func (a *Arrivals[T]) Take() []T {
	a.mu.Lock()
	defer a.mu.Unlock()
	list := a.list
	a.list = nil
	return list
}

// Owned is how many spills this node owns.
func (n *Node) Owned() int32 { return n.owned.Load() }

// Switchable reports whether no switch refused lately holds the next one
// back (backoff).
func (n *Node) Switchable() bool { return n.now() >= n.retryAt.Load() }

// now is the node's clock in Unix ns.
func (n *Node) now() int64 { return n.Clock.Now().UnixNano() }

// open makes the node's part of a spill; its budget is the leaser's.
func (n *Node) open(tenant, owner string, epoch int64, limits limiter.Limits) *Spill {
	cfg := n.Limits()
	sp := &Spill{Owner: owner, Epoch: epoch, Key: budgetKey(tenant, epoch), clk: n.Clock, since: n.Clock.Now(), Window: cfg.Window,
		Mirror: limiter.NewTenant(limiter.Limits{}, cfg.Window, cfg.SlotTTL)}
	sp.Line.Clock = n.Clock
	sp.Budget = n.Leaser.Budget(lease.Config{Key: sp.Key, Limits: limits, Window: cfg.Window,
		Settles: true, OnStoreDown: lease.Share}, n.Live)
	return sp
}

// Own makes a spill of tenant this node owns, on limits, not started yet
// (Start).
func (n *Node) Own(tenant string, limits limiter.Limits) *Spill {
	sp := n.open(tenant, n.Self, n.now(), limits)
	sp.ready, sp.done = make(chan struct{}), make(chan struct{})
	sp.told = make(map[string]time.Time)
	return sp
}

// Start seals the tenant's limiter and starts the budget of sp, its spill
// (in t.Holder), from the limiter's state; rate is what turned it hot. It
// reports whether Redis took the seed in time; if not, the spill is undone
// (the limiter unsealed, the holder cleared, the budget dropped) and no
// switch is tried for backoff.
func (n *Node) Start(sp *Spill, t *Tenant, rate float64) bool {
	s := t.Lim.Seal(n.now())
	sp.Budget.Seed(seed(s), slotsOf(s))
	select {
	case <-sp.Budget.Seeded():
	case <-n.Clock.After(seedWait):
		sp.failed.Store(true)
	}
	if sp.failed.Load() {
		// Unsealed first: a request that sees no spill finds the limiter
		// deciding again. (The limiter and the holder are the same for
		// every struct of the tenant: a reload meanwhile changes nothing.)
		t.Lim.Unseal()
		t.Holder.CompareAndSwap(sp, nil)
		t.Holder.EndEpoch(sp.Epoch)
		close(sp.ready)
		n.Leaser.Drop(sp.Key)
		n.retryAt.Store(n.now() + int64(backoff))
		n.Phase("refused")
		n.Log.Warn("spillover", "phase", "refused", "tenant", t.Name, "rate", round1(rate), "reason", "store_unreachable")
		return false
	}
	close(sp.ready)
	t.Queue.Kick() // those waiting are decided on the spill
	n.owned.Add(1)
	n.Phase("on")
	n.Log.Info("spillover", "phase", "on", "tenant", t.Name, "rate", round1(rate),
		"threshold", n.Limits().SpilloverRPS, "budget", sp.Key)
	return true
}

// Join makes this node's part of the spill m announces and makes it the
// tenant's in h; false: h holds another (a change in progress), and the
// new budget is dropped.
func (n *Node) Join(m Msg, h *Holder) (*Spill, bool) {
	sp := n.open(m.Tenant, m.Owner, m.Epoch, m.Limits)
	sp.done = make(chan struct{})
	sp.until.Store(n.now() + int64(leaseTerm))
	if !h.CompareAndSwap(nil, sp) {
		n.Leaser.Drop(sp.Key)
		return nil, false
	}
	sp.WatchLine()
	return sp, true
}

// Renew takes the owner's word again on a member: sp is served leaseTerm
// more. It returns the arrivals since the owner last asked.
func (n *Node) Renew(sp *Spill) int64 {
	sp.until.Store(n.now() + int64(leaseTerm))
	return sp.arrivals.Swap(0)
}

// Arrivals are a member's requests on sp since the owner last asked.
func (sp *Spill) Arrivals() int64 { return sp.arrivals.Load() }

// Lapsed reports whether the spill is over for this node: closed, or on a
// member, not renewed by its owner in time.
func (n *Node) Lapsed(sp *Spill) bool {
	return sp.closed.Load() || sp.Owner != n.Self && n.now() > sp.until.Load()
}

// OwnerReady is sp if it is the spill this node, self, the tenant's owner,
// serves it on, once the budget is ready; nil when it is not (or it failed
// to start). A spill starting is waited for.
func OwnerReady(sp *Spill, self string) *Spill {
	if sp == nil || sp.Owner != self || sp.closed.Load() {
		return nil
	}
	select {
	case <-sp.ready:
	default:
		// Starting: wait for Redis to hold the seed (or the switch to fail).
		timer := sp.clk.NewTimer(seedWait + 50*time.Millisecond)
		select {
		case <-sp.ready:
		case <-timer.Chan():
		}
		timer.Stop()
	}
	if sp.failed.Load() || !isClosed(sp.ready) || sp.closed.Load() {
		return nil
	}
	return sp
}

// Usable reports whether this node may serve a request on sp instead of
// forwarding it to owner: not while Redis does not answer this node (its
// share would start as if the window were spent: the owner serves
// better).
func (n *Node) Usable(sp *Spill, owner string) bool {
	return sp != nil && sp.Owner == owner && !sp.closed.Load() && n.now() <= sp.until.Load() &&
		!sp.Budget.Degraded() && !sp.Budget.Fenced()
}

// Arrive counts a request an edge serves on sp, for the owner's rate.
func (sp *Spill) Arrive() { sp.arrivals.Add(1) }

// Abandon marks sp, this node's spill of owner, abandoned, once: a request
// this node forwarded to owner failed. It reports whether this call did
// (the caller leaves the spill: "owner_unreachable").
func (n *Node) Abandon(sp *Spill, owner string, h *Holder) bool {
	if sp == nil || sp.Owner != owner || owner == n.Self {
		return false
	}
	if u := sp.until.Load(); u == abandonedUntil || !sp.until.CompareAndSwap(u, abandonedUntil) {
		return false // abandoned already, or renewed this instant: the next request sees it
	}
	h.AbandonedAt.Store(n.now())
	return true
}

// Take takes tokens from the spill's budget (sp held with RLock); again: a
// waiting request, asked before. A refusal that awaits a renewal waits
// for it up to wait.
func (n *Node) Take(sp *Spill, tokens int64, again bool, wait time.Duration) (lease.Ticket, lease.Decision) {
	take := sp.Budget.Take
	if again {
		take = sp.Budget.Retake // a waiting request: asked before
	}
	tk, d := take(n.now(), tokens)
	if !d.Allowed && d.Renewal != nil {
		timer := n.Clock.NewTimer(wait)
		select {
		case <-d.Renewal:
			tk, d = sp.Budget.Retake(n.now(), tokens)
		case <-timer.Chan():
		}
		timer.Stop()
	}
	return tk, d
}

// Decision is what the rate-limit headers say of a spilled tenant: its
// limits, and what the shared window held at the last grant (every node's
// blocks counted whole: remaining errs low).
func Decision(limits limiter.Limits, d *lease.Decision, window time.Duration) limiter.Decision {
	out := limiter.Decision{Allowed: d.Allowed, Limited: d.Limited, RetryAfter: d.RetryAfter,
		LimitRequests: limits.Requests, LimitTokens: limits.Tokens, LimitConcurrency: limits.Concurrency,
		ResetRequests: window, ResetTokens: window}
	out.RemainingRequests = max(0, limits.Requests-d.Used.Requests)
	out.RemainingTokens = max(0, limits.Tokens-d.Used.Tokens)
	if limits.Requests <= 0 {
		out.RemainingRequests = -1
	}
	if limits.Tokens <= 0 {
		out.RemainingTokens = -1
	}
	return out
}

// View is the tenant's spillover, sp, as /tenants/{name} shows it.
func (n *Node) View(sp *Spill) status.Spill {
	if sp == nil || sp.failed.Load() || sp.closed.Load() {
		return status.Spill{Mode: "owner"}
	}
	s := sp.Budget.Stats(n.now())
	return status.Spill{Mode: "spill", Owner: sp.Owner, Budget: sp.Key, SinceMs: sp.clk.Since(sp.since).Milliseconds(),
		Blocks: s.Blocks, LeftReq: s.Left.Requests, LeftTok: s.Left.Tokens, SlotsHeld: s.SlotsHeld, SlotsUsed: s.SlotsUsed,
		WindowReq: s.Used.Requests, WindowTok: s.Used.Tokens, Degraded: s.Degraded}
}

// A Member is a tenant as an owner's "on" finds it on this node.
type Member interface {
	// RingOwner is the tenant's owner by this node's ring.
	RingOwner() string
	Holder() *Holder
	// InFallback reports whether this node serves the tenant on its
	// fallback share, or has not told the owner yet all the share
	// admitted.
	InFallback() bool
}

// Refusal is why this node must not take the spill m announces, as a code
// and a message; "" if it may. cur is the tenant's spill here now.
func (n *Node) Refusal(m *Msg, cur *Spill, t Member) (code, msg string) {
	switch {
	case t.RingOwner() != m.Owner || m.Owner == n.Self:
		// This node's ring names another owner: it forwards there.
		return "not_owner", "This node's ring names another owner."
	case m.Epoch <= t.Holder().Ended():
		// Ended here already (this node left it, or its "off" came
		// first): a late or repeated "on" must not start it again; the
		// requests go to the owner.
		return "spill_ended", "This node left that spillover."
	case m.Window != n.Limits().Window:
		return "window_differs", "This node's limits.window differs from the owner's."
	case cur != nil && cur.Owner == n.Self:
		return "busy", "This node's own spillover of the tenant is still ending."
	case t.InFallback() || cur != nil && cur.abandoned():
		// This node enforces its fallback share, or the owner has not
		// been told yet what the share admitted (which charges it to the
		// budget): the budget's window would not count it.
		return "in_fallback", "This node serves the tenant on its fallback share until the owner has its admissions."
	}
	return "", ""
}
