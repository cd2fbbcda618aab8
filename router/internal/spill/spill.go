// Package spill is hot-tenant spillover. A tenant whose requests arrive at
// its owner faster than limits.spillover_rps is served by every node
// itself, on blocks of its limits leased from Redis (package lease),
// instead of every request taking a hop to its owner:
//
//   - On. The owner seals its limiter (it decides nothing more there, so no
//     admission slips in after its state was read), starts the tenant's
//     budget in Redis from that state — the window's buckets and the slots
//     of the calls still running — and, once Redis holds it, serves the
//     tenant on the budget and tells every member so (a signed POST,
//     renewed every Tick, that answers with the member's arrivals).
//   - Meanwhile every admission, on any node, is recorded in the fallback
//     ledger (the router's) and reported to the owner within milliseconds,
//     so the owner's sealed limiter keeps counting everything: it is the
//     tenant's state for a handoff, a snapshot, or the way back.
//   - Off (the cluster-wide rate stays below half the threshold, Redis
//     stops answering, the owner loses the tenant or drains). The owner
//     tells every member; each stops, reports what its ledger still holds
//     and answers; then the owner reports its own, unseals and decides
//     alone again. A member that does not answer stops by itself leaseTerm
//     after the owner's last word: the owner waits that out and counts, on
//     top, what Redis says the budget's window holds.
//
// An edge whose ring names another owner, or whose owner has gone silent,
// drops the spill and forwards as usual; its ledger goes to whoever owns
// the tenant then.
//
// The package owns a spill's budget and mirror, its seeding from the
// owner's limiter, its announcements and their answers, its end on the
// owner and on a member, and the switch's decision by rate. It knows
// nothing of calls, of the router's tenants, state and view, or of how an
// announcement travels: package spillover, which runs it on the router's
// tenants, gives it a tenant's limiter, line and ledger (Tenant), the
// router the members to tell and a signed call to each (Peers), and the
// router serves the announcements it receives.
package spill

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
)

// Path receives an owner's word that a tenant spills (or no more).
const Path = "/_ringgate/spill"

const (
	// Tick is how often the rates are measured and a spill renewed.
	Tick = 250 * time.Millisecond
	// hotTicks and coolTicks are ticks in a row above the threshold (at
	// the owner) before a tenant spills, and below half of it
	// (cluster-wide) before it goes back.
	hotTicks, coolTicks = 2, 4
	// leaseTerm is how long an edge serves a spill after the owner's last
	// word.
	leaseTerm = 2 * time.Second
	// seedWait bounds the owner's wait for Redis to hold the seed.
	seedWait = 250 * time.Millisecond
	// CallTimeout bounds one announcement to a member.
	CallTimeout = 250 * time.Millisecond
	// FenceWait bounds the owner's wait for Redis to fence the budget's
	// window when a member did not confirm the end.
	FenceWait = 100 * time.Millisecond
	// handoverTimeout bounds one announcement of an end for a handover:
	// within the new owner's handoff_timeout.
	handoverTimeout = 100 * time.Millisecond
	// backoff is how long after a switch refused (Redis did not take the
	// seed) no tenant is switched: each try holds the tenant's requests
	// for up to seedWait.
	backoff = 5 * time.Second
)

// abandonedUntil marks a spill's until once this node abandoned it
// (Abandon): lapsed for Usable, left by the abandon's own leave.
const abandonedUntil = -1

// Spill is a tenant's spillover as one node serves it.
type Spill struct {
	Owner  string
	Epoch  int64 // the owner's clock when it started: names the budget
	Key    string
	Budget *lease.Budget
	// Mirror is a limiter with no limits: it names each admission's
	// buckets for the ledger.
	Mirror *limiter.Tenant
	Window time.Duration   // the budget's
	clk    clockwork.Clock // the node's: since, and the waits for its end
	since  time.Time

	// Owner: ready is closed once the budget holds the seed, or the
	// switch failed (failed).
	ready  chan struct{}
	failed atomic.Bool
	// Owner: the members that took the spill, when they last did (the
	// owner's loop writes it; End reads it once the loop is done with
	// it, or at a handover under toldMu).
	toldMu sync.Mutex
	told   map[string]time.Time
	ending atomic.Bool   // End started
	done   chan struct{} // closed when End is over (an edge: Leave)

	// Admissions hold mu shared; ending the spill takes it, so none is
	// half done (on the budget, not yet in the ledger) when the ledger
	// is flushed. closed is set with mu held.
	mu     sync.RWMutex
	closed atomic.Bool

	until    atomic.Int64 // edge: serves until (router clock) unless renewed
	arrivals atomic.Int64 // edge: requests since the owner last asked

	// Line is where this node's requests the budget refuses wait for it,
	// as they would in the tenant's line on its owner.
	Line queue.Queue
}

// budgetKey is the budget key of tenant's spill of epoch.
func budgetKey(tenant string, epoch int64) string {
	return "tenant:" + tenant + "@" + strconv.FormatInt(epoch, 10)
}

// Msg is an owner's announcement. The owner's limits and window are the
// budget's (a rolling reload: every node leases on the owner's).
type Msg struct {
	Tenant string         `json:"tenant"`
	Owner  string         `json:"owner"`
	Epoch  int64          `json:"epoch"`
	On     bool           `json:"on"`
	Limits limiter.Limits `json:"limits"`
	Window time.Duration  `json:"window"`
}

// Reply is a member's answer: the tenant's requests it took since the
// owner last asked.
type Reply struct {
	Arrivals int64 `json:"arrivals"`
}

// WatchLine has the spill's budget tell its line of room: once the spill
// is the tenant's (a spill that lost the race for it must not take the
// budget's watch from the one that won).
func (sp *Spill) WatchLine() { sp.Budget.Watch(sp.Line.Kick, sp.Line.Waiting, nil) }

// abandoned reports whether this node abandoned the spill (Abandon).
func (sp *Spill) abandoned() bool { return sp.until.Load() == abandonedUntil }

// RLock is held by an admission on the spill: ending it waits for the
// admission to be in the ledger.
func (sp *Spill) RLock() { sp.mu.RLock() }

// RUnlock ends what RLock began.
func (sp *Spill) RUnlock() { sp.mu.RUnlock() }

// WaitDone waits, at most d, for the spill's end (on its owner) or leave
// (on a member) to be over, and reports whether it is.
func (sp *Spill) WaitDone(d time.Duration) bool { return waitClosed(sp.clk, sp.done, d) }

// Told is when this node, its owner, last told node of the spill; zero if
// never, or once node confirmed its end.
func (sp *Spill) Told(node string) time.Time {
	sp.toldMu.Lock()
	defer sp.toldMu.Unlock()
	return sp.told[node]
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func waitClosed(clk clockwork.Clock, c chan struct{}, d time.Duration) bool {
	timer := clk.NewTimer(d)
	defer timer.Stop()
	select {
	case <-c:
		return true
	case <-timer.Chan():
		return false
	}
}

// Holder is a tenant's spillover on this node, shared by the tenant's
// structs across reloads.
type Holder struct {
	atomic.Pointer[Spill]
	// ended is the newest epoch this node stopped serving: an
	// announcement of it arriving late (after its end) is refused.
	ended atomic.Int64
	// live is the count of tenants with a spill, kept by Store and
	// CompareAndSwap (nil: not counted).
	live *atomic.Int64
	// LeftAt is when (router clock) this node last stopped serving a
	// spill it did not own (Leave): the owner's answers seen before then
	// miss what the cluster admitted on the spill. AbandonedAt is when it
	// last abandoned one (Abandon): other nodes may have gone on admitting
	// on that budget, which knows nothing of this node's share.
	LeftAt, AbandonedAt atomic.Int64
}

// NewHolder makes a holder that keeps live, the count of tenants with a
// spill (nil: none).
func NewHolder(live *atomic.Int64) *Holder { return &Holder{live: live} }

// Store sets the tenant's spill, counted.
func (h *Holder) Store(sp *Spill) {
	h.count(h.Pointer.Swap(sp), sp)
}

// CompareAndSwap is atomic.Pointer's, counted.
func (h *Holder) CompareAndSwap(old, sp *Spill) bool {
	if !h.Pointer.CompareAndSwap(old, sp) {
		return false
	}
	h.count(old, sp)
	return true
}

func (h *Holder) count(old, sp *Spill) {
	switch {
	case h.live == nil:
	case old == nil && sp != nil:
		h.live.Add(1)
	case old != nil && sp == nil:
		h.live.Add(-1)
	}
}

// Missed reports whether the owner's answers seen at (router clock) miss
// admissions on another node's spill that this node, self, took part in:
// it serves one now, or left one after at.
func (h *Holder) Missed(self string, at int64) bool {
	if sp := h.Load(); sp != nil && sp.Owner != self {
		return true
	}
	return h.LeftAt.Load() > at
}

// Ended is the newest epoch this node stopped serving.
func (h *Holder) Ended() int64 { return h.ended.Load() }

// EndEpoch records that the spill of epoch e ended here.
func (h *Holder) EndEpoch(e int64) {
	for {
		cur := h.ended.Load()
		if e <= cur || h.ended.CompareAndSwap(cur, e) {
			return
		}
	}
}

// Ending reports whether this node, its owner, began ending the spill.
func (sp *Spill) Ending() bool { return sp.ending.Load() }
