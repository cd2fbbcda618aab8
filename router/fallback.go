package router

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/limiter"
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

// maxFallbackEntries bounds one tenant's ledger; past it the oldest
// entries are dropped (their buckets have long left the window at any
// sensible share).
const maxFallbackEntries = 1 << 14

// reportSoon is how long after a fallback admission the ledger is sent, so
// a burst goes in one message.
const reportSoon = 5 * time.Millisecond

type fallbackLedger struct {
	// lim is the tenant's fallback share, made at its first use (share):
	// a node configured with many tenants serves few in fallback. Made
	// under mu with the window in force (setWindow).
	lim             atomic.Pointer[limiter.Tenant]
	window, slotTTL time.Duration

	sendMu sync.Mutex // one report at a time
	mu     sync.Mutex
	owner  string // the owner the admissions could not reach
	// seed is what the last episode's seed charged the share with, for
	// seedOwner: an episode for the same owner that starts again (it
	// answered for a moment) swaps its seed for this one rather than add
	// to it (seedFallback).
	seed      limiter.State
	seedOwner string
	// startLog bounds the start lines of episodes that restart for the
	// same owner; logged says whether this episode's start was logged,
	// so that its end is logged with it or not at all. An end may read
	// the next episode's (a start right after the end's swap): a line's
	// pairing, never a count.
	startLog logMeter
	logged   atomic.Bool
	// pending are not delivered yet, oldest first.
	pending []*fallbackEntry
	soon    atomic.Bool // a report is scheduled
}

type fallbackEntry struct {
	d limiter.Delta
	// sent: the entry went out in a report, so the owner may have applied
	// it even if the report failed (its answer lost); reported: the owner
	// said it took it.
	sent, reported bool
}

// admitted records a call admitted under the fallback share and schedules
// a report.
//
// epoch names the spillover the call was admitted on (0: a fallback share).
func (r *Router) fallbackAdmitted(t *tenant, tk *limiter.Ticket, epoch int64) *fallbackEntry {
	l := t.c().fb
	d := limiter.DeltaOf(tk)
	d.Epoch = epoch
	e := &fallbackEntry{d: r.ids.Name(d)}
	l.mu.Lock()
	l.owner = r.view.Load().owner(t.name)
	l.add(e)
	l.mu.Unlock()
	r.reportFallbackSoon(t)
	return e
}

// add queues e; l.mu is held.
func (l *fallbackLedger) add(e *fallbackEntry) {
	if len(l.pending) >= maxFallbackEntries {
		l.pending = append(l.pending[:0], l.pending[len(l.pending)/2:]...)
	}
	l.pending = append(l.pending, e)
}

// reportFallbackSoon schedules a report of the tenant's ledger.
func (r *Router) reportFallbackSoon(t *tenant) {
	l := t.c().fb
	if l.soon.CompareAndSwap(false, true) {
		go func() {
			time.Sleep(reportSoon)
			l.soon.Store(false)
			r.reportFallback(t)
		}()
	}
}

// waitsFor reports whether the ledger holds admissions the owner named in
// a new view has not been told of.
func (l *fallbackLedger) waitsFor(owner string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending) > 0 && owner != l.owner
}

// share is the tenant's fallback share, made now if it was not yet (with
// no limits: fallbackLimiter sets the share's before any admission).
func (l *fallbackLedger) share() *limiter.Tenant {
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

// made is the fallback share if it was made, else nil: a limiter a request
// holds is the tenant's share only if there is one.
func (l *fallbackLedger) made() *limiter.Tenant { return l.lim.Load() }

// setWindow sets the window and slot TTL a share made from now on counts
// over (a reload), and returns the share if there is one already.
func (l *fallbackLedger) setWindow(window, slotTTL time.Duration) *limiter.Tenant {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.window, l.slotTTL = window, slotTTL
	return l.lim.Load()
}

// delivered reports whether the owner was told everything in the ledger.
func (l *fallbackLedger) delivered() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending) == 0
}

// fallbackFinished accounts for the end of a call admitted under the
// fallback share: d is what it changed (limiter.FinishDelta), or what
// taking it back changed (spillRoom.Cancel). Never sent,
// the entry is amended. Reported, d goes after it on its own. Sent but not
// confirmed, the owner may or may not have it: d joins the ledger behind it
// under its own ID, so a report sent again carries both, the owner skips
// the one it has and applies the release after the admission either way.
func (r *Router) fallbackFinished(t *tenant, e *fallbackEntry, d limiter.Delta) {
	l := t.c().fb
	l.mu.Lock()
	switch {
	case !e.sent:
		e.d.Requests += d.Requests
		e.d.Tokens += d.Tokens
		e.d.Slots += d.Slots
		l.mu.Unlock()
	case e.reported:
		l.mu.Unlock()
		r.reportDelta(t, d)
	default:
		l.add(&fallbackEntry{d: r.ids.Name(d)})
		l.mu.Unlock()
		r.reportFallbackSoon(t)
	}
}

// reportFallback tells the node that counts the tenant now what this node
// admitted for it under its share; what cannot be delivered stays.
func (r *Router) reportFallback(t *tenant) {
	l := t.c().fb
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
		return
	}
	if err := r.deliverDeltas(t, "", ds, 0); err != nil {
		return // kept for the next report: the episode's end or a new owner
	}
	l.mu.Lock()
	for _, e := range sent {
		e.reported = true
	}
	l.pending = slices.DeleteFunc(l.pending, func(e *fallbackEntry) bool { return e.reported })
	l.mu.Unlock()
	r.metrics.FallbackReported.Add(float64(len(ds)))
}

// reportFallbacksTo reports the ledgers of tenants whose owner the view v
// changed (from the one they could not reach): after a crash the new owner
// counts what the edges admitted meanwhile.
func (r *Router) reportFallbacksTo(v *view) {
	for name, t := range r.state.Load().byName {
		c := t.peek()
		if c == nil {
			continue // never served here: nothing admitted, no episode
		}
		owner := v.owner(name)
		if c.fb.waitsFor(owner) {
			go r.reportFallback(t)
		}
		if c.inFallback.Load() {
			// An episode is about one owner: with another, the next
			// episode starts afresh (and is seeded afresh).
			c.fb.mu.Lock()
			other := c.fb.owner != owner
			c.fb.mu.Unlock()
			if other && c.inFallback.CompareAndSwap(true, false) {
				if c.fb.logged.Load() {
					r.log.Info("fallback", "phase", "end", "tenant", t.name, "owner", owner, "reason", "new_owner")
				}
				c.fbQueue.Kick()
			}
		}
	}
}

// ownerSeen is a tenant's usage at its owner as the x-ratelimit headers of
// the owner's last answer relayed here reported it.
type ownerSeen struct {
	at, requests, tokens atomic.Int64
}

// noteOwnerUsage records what the owner's answer says the tenant has used.
// It allocates nothing: two header lookups and integer parses.
func (r *Router) noteOwnerUsage(t *tenant, h *fasthttp.ResponseHeader) {
	if t.team != nil || t.models != nil {
		// The x-ratelimit headers report the tightest level, not the
		// tenant's: the owner says what each level used (levels.go).
		r.noteLevelsUsed(t, h.Peek(levelsUsedHeader))
		return
	}
	used := func(limit, remaining string) int64 {
		l, err1 := strconv.ParseInt(string(h.Peek(limit)), 10, 64)
		rem, err2 := strconv.ParseInt(string(h.Peek(remaining)), 10, 64)
		if err1 != nil || err2 != nil || l <= 0 {
			return 0
		}
		return max(0, l-rem)
	}
	t.c().seen.requests.Store(used("x-ratelimit-limit-requests", "x-ratelimit-remaining-requests"))
	t.c().seen.tokens.Store(used("x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens"))
	t.c().seen.at.Store(r.clock())
}

// seedFromAnswers charges the tenant's fallback share with its share (1/n)
// of the owner's usage as last seen in its answers; with none seen within
// the window, with 1/n of the whole limit: an edge that knows nothing of
// what the owner admitted before it went silent assumes it admitted all it
// could, and its share opens as that window passes. So does an edge whose
// last answers from the owner are from before it left a spill (what every
// node admitted on the spill is only in Redis's window of the budget,
// which is what did not answer), and one told to (blind).
func (r *Router) seedFromAnswers(share *limiter.Tenant, t *tenant, n int64, blind bool) string {
	now := r.clock()
	window := int64(t.c().lim.Window())
	at := t.c().seen.at.Load()
	reqs, toks := t.c().seen.requests.Load(), t.c().seen.tokens.Load()
	how := "owner_answers"
	if blind || at == 0 || now-at >= window || t.answersMissSpill(r.node, at) {
		at, reqs, toks, how = now, t.limits.Requests, t.limits.Tokens, "full_window"
	}
	ceil := func(v int64) int64 { return (v + n - 1) / n }
	share.ChargeAt(now, at, ceil(reqs), ceil(toks))
	return how
}
