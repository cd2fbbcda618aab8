// Package away keeps what a node admits for tenants it does not count, and
// the deltas it owes the node that does: a tenant's fallback ledger (what
// its fallback share admitted while its owner was unreachable), the owners
// the node admits shares for (which its gossip metadata names), the owner's
// usage as its answers report it (a share's seed), the deltas held for
// tenants not taken over yet, and the bound on deltas being sent again.
//
// The package owns that bookkeeping and when a report is due. It knows
// nothing of tenants, rings or hops: a tenant is a name, the node counting
// it is its caller's to find, and how deltas travel is a function its
// caller gives (a hop, signed). The episode around a ledger (the share's
// limits and seed, its start and end, where its reports go) is package
// fallback's: it reads the tenant model, which imports this package.
package away

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/deltaid"
)

// What this node admits under its strict share while a tenant's owner is
// unreachable is still the tenant's usage: the owner (it may be alive but
// slow to accept a connection) or whoever owns the tenant once the ring has
// changed (a crash) must count it before it admits on top. The ledger keeps
// each such admission as a delta on the buckets it was charged in and
// reports it as soon as it can: a few milliseconds after the admission (an
// owner that is alive then counts it at once), when the episode ends (the
// owner answers again), and when the ring gives the tenant another owner.
// What cannot be delivered stays in the ledger for the next attempt. A call
// still running when its admission is reported reports its end too.

// maxEntries bounds one tenant's ledger; past it the oldest entries are
// dropped (their buckets have long left the window at any sensible share).
const maxEntries = 1 << 14

// reportSoon is how long after a fallback admission the ledger is sent, so
// a burst goes in one message.
const reportSoon = 5 * time.Millisecond

// Ledger is one tenant's fallback share and the admissions made on it that
// its owner has not been told of.
type Ledger struct {
	// lim is the tenant's fallback share, made at its first use (Share):
	// a node configured with many tenants serves few in fallback. Made
	// under mu with the window in force (SetWindow).
	lim             atomic.Pointer[limiter.Tenant]
	window, slotTTL time.Duration

	sendMu sync.Mutex // one report at a time
	mu     sync.Mutex
	owner  string // the owner the admissions could not reach
	// seed is what the last episode's seed charged the share with, for
	// seedOwner: an episode for the same owner that starts again (it
	// answered for a moment) swaps its seed for this one rather than add
	// to it (SwapSeed).
	seed      limiter.State
	seedOwner string
	// pending are not delivered yet, oldest first.
	pending []*Entry
	soon    atomic.Bool // a report is scheduled
}

// Entry is one admission (or end of a call) in a ledger.
type Entry struct {
	d limiter.Delta
	// sent: the entry went out in a report, so the owner may have applied
	// it even if the report failed (its answer lost); reported: the owner
	// said it took it.
	sent, reported bool
}

// NewLedger makes a tenant's ledger; its share, when made, counts over
// window with slotTTL.
func NewLedger(window, slotTTL time.Duration) *Ledger {
	return &Ledger{window: window, slotTTL: slotTTL}
}

// Admitted records a call admitted under the fallback share while owner
// could not be reached, named by ids; the caller schedules a report
// (ReportSoon).
//
// epoch names the spillover the call was admitted on (0: a fallback share).
func (l *Ledger) Admitted(owner string, tk *limiter.Ticket, epoch int64, ids *deltaid.IDs) *Entry {
	d := limiter.DeltaOf(tk)
	d.Epoch = epoch
	e := &Entry{d: ids.Name(d)}
	l.mu.Lock()
	l.owner = owner
	l.add(e)
	l.mu.Unlock()
	return e
}

// add queues e; l.mu is held.
func (l *Ledger) add(e *Entry) {
	if len(l.pending) >= maxEntries {
		l.pending = append(l.pending[:0], l.pending[len(l.pending)/2:]...)
	}
	l.pending = append(l.pending, e)
}

// ReportSoon runs report a moment from now (reportSoon), unless a run is
// scheduled already: a burst of admissions goes in one report.
func (l *Ledger) ReportSoon(report func()) {
	if l.soon.CompareAndSwap(false, true) {
		go func() {
			time.Sleep(reportSoon)
			l.soon.Store(false)
			report()
		}()
	}
}

// WaitsFor reports whether the ledger holds admissions the owner named in
// a new view has not been told of.
func (l *Ledger) WaitsFor(owner string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending) > 0 && owner != l.owner
}

// Owner is the owner the ledger's admissions could not reach.
func (l *Ledger) Owner() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.owner
}

// SetOwner makes owner the one the admissions cannot reach (an episode
// starts), and reports whether it was already.
func (l *Ledger) SetOwner(owner string) (again bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	again = l.owner == owner
	l.owner = owner
	return again
}

// Share is the tenant's fallback share, made now if it was not yet (with
// no limits: the router sets the share's before any admission).
func (l *Ledger) Share() *limiter.Tenant {
	if s := l.lim.Load(); s != nil {
		return s
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.lim.Load(); s != nil {
		return s
	}
	s := limiter.NewTenant(limiter.Limits{}, l.window, l.slotTTL)
	l.lim.Store(s)
	return s
}

// Made is the fallback share if it was made, else nil: a limiter a request
// holds is the tenant's share only if there is one.
func (l *Ledger) Made() *limiter.Tenant { return l.lim.Load() }

// SetWindow sets the window and slot TTL a share made from now on counts
// over (a reload), and returns the share if there is one already.
func (l *Ledger) SetWindow(window, slotTTL time.Duration) *limiter.Tenant {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.window, l.slotTTL = window, slotTTL
	return l.lim.Load()
}

// SlotTTL is the slot TTL a share counts with.
func (l *Ledger) SlotTTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.slotTTL
}

// SwapSeed records seed as what an episode for owner charged the share
// with, and returns the seed it replaces: the last episode's if that was
// for the same owner, else none (limiter.Tenant.Replace).
func (l *Ledger) SwapSeed(owner string, seed limiter.State) (last limiter.State) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seedOwner == owner {
		last = l.seed
	}
	l.seed, l.seedOwner = seed, owner
	return last
}

// ShareOf is a node's strict share of each of limits with n members live
// (limit / n, rounded down), and whether anything fits at all: a limit
// smaller than the member count leaves a share of zero, -1 in the share
// returned (the limiter reads <= 0 as no limit), and admitting even one
// would risk the promise.
func ShareOf(limits limiter.Limits, n int64) (limiter.Limits, bool) {
	share := func(l int64) int64 {
		if l <= 0 {
			return 0 // no limit stays no limit
		}
		if s := l / n; s > 0 {
			return s
		}
		return -1
	}
	l := limiter.Limits{Requests: share(limits.Requests), Tokens: share(limits.Tokens), Concurrency: share(limits.Concurrency)}
	return l, l.Requests >= 0 && l.Tokens >= 0 && l.Concurrency >= 0
}

// Delivered reports whether the owner was told everything in the ledger.
func (l *Ledger) Delivered() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending) == 0
}

// Finish says what is left to do of a call's end once Finished has
// accounted for it.
type Finish int

const (
	// Amended: the entry was never sent; it now says what the call
	// changed in all.
	Amended Finish = iota
	// Alone: the owner has the admission; the end is to be reported on
	// its own.
	Alone
	// Queued: the end joined the ledger; a report is to be scheduled.
	Queued
)

// Finished accounts for the end of a call admitted under the fallback
// share: d is what it changed (limiter.FinishDelta), or what taking it
// back changed. Never sent, the entry is amended. Reported, d goes after
// it on its own. Sent but not confirmed, the owner may or may not have it:
// d joins the ledger behind it under its own ID (from ids), so a report
// sent again carries both, the owner skips the one it has and applies the
// release after the admission either way.
func (l *Ledger) Finished(e *Entry, d limiter.Delta, ids *deltaid.IDs) Finish {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case !e.sent:
		e.d.Requests += d.Requests
		e.d.Tokens += d.Tokens
		e.d.Slots += d.Slots
		return Amended
	case e.reported:
		return Alone
	default:
		l.add(&Entry{d: ids.Name(d)})
		return Queued
	}
}

// Report sends what the ledger holds with send, one report at a time, and
// returns how many deltas the owner took; what cannot be delivered stays.
func (l *Ledger) Report(send func([]limiter.Delta) error) int {
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	l.mu.Lock()
	sent := slices.Clone(l.pending)
	ds := make([]limiter.Delta, len(sent))
	for i, e := range sent {
		ds[i] = e.d
		e.sent = true
	}
	l.mu.Unlock()
	if len(ds) == 0 {
		return 0
	}
	if err := send(ds); err != nil {
		return 0 // kept for the next report: the episode's end or a new owner
	}
	l.mu.Lock()
	for _, e := range sent {
		e.reported = true
	}
	l.pending = slices.DeleteFunc(l.pending, func(e *Entry) bool { return e.reported })
	l.mu.Unlock()
	return len(ds)
}

// Delta is what the entry says the call changed.
func (l *Ledger) Delta(e *Entry) limiter.Delta {
	l.mu.Lock()
	defer l.mu.Unlock()
	return e.d
}

// Tried reports whether e went out in a report that is over, with no
// other scheduled: if e is still in the ledger, the owner did not take it.
func (l *Ledger) Tried(e *Entry) bool {
	l.mu.Lock()
	sent := e.sent
	l.mu.Unlock()
	if !sent || l.soon.Load() || !l.sendMu.TryLock() {
		return false
	}
	l.sendMu.Unlock()
	return true
}
