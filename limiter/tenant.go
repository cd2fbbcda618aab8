package limiter

import (
	"sync"
	"sync/atomic"
	"time"
)

// Limits are one tenant's limits; a value <= 0 means no limit on that
// dimension.
type Limits struct {
	Requests    int64 // per window
	Tokens      int64 // per window
	Concurrency int64 // slots held at once
}

// Dimension names what a refusal was about.
type Dimension uint8

const (
	None Dimension = iota
	Requests
	Tokens
	Concurrency
)

func (d Dimension) String() string {
	switch d {
	case Requests:
		return "requests"
	case Tokens:
		return "tokens"
	case Concurrency:
		return "concurrency"
	}
	return "none"
}

// Decision is the outcome of Admit together with what the rate-limit headers
// report. Remaining values are -1 for an unlimited dimension.
type Decision struct {
	Allowed bool
	// Limited is the first dimension that refused, when !Allowed.
	Limited Dimension
	// TooLarge means the request alone exceeds the limit of Limited: waiting
	// will never admit it.
	TooLarge bool
	// Moved means nothing was decided: the tenant's state was handed over
	// to another node (Freeze), which decides for it now (MovedTo).
	Moved bool
	// RetryAfter is how long until the refused dimension has room, when
	// !Allowed. For concurrency it is an estimate (a slot frees when a
	// stream ends, which no clock predicts).
	RetryAfter time.Duration

	LimitRequests, RemainingRequests int64
	LimitTokens, RemainingTokens     int64
	LimitConcurrency, InFlight       int64
	ResetRequests, ResetTokens       time.Duration
}

// Ticket is what an admitted request keeps to settle its tokens and release
// its slot. The zero Ticket is not admitted.
type Ticket struct {
	bucket     int64 // request and token bucket
	slotBucket int64
	tokens     int64 // tokens charged so far
	admitted   bool
	released   bool
	gen        uint32 // the tenant's rebucket generation at admission (rebucket.go)
	imports    uint16 // the tenant's Imports at admission, wrapping (Tenant.fresh)
}

// Tokens reports the tokens currently charged for the ticket.
func (t *Ticket) Tokens() int64 { return t.tokens }

// Tenant enforces one tenant's three dimensions. It is safe for concurrent
// use; a decision takes one uncontended mutex and allocates nothing.
type Tenant struct {
	mu       sync.Mutex
	limits   Limits
	frozen   bool // state handed over to another node (Freeze)
	sealed   bool // decisions made elsewhere for now; this state still counts (Seal)
	movedTo  atomic.Pointer[string]
	requests Window
	tokens   Window
	slots    Window // slots of calls running on this node
	// away are the slots of calls running on other nodes, by node
	// (away.go): they count against the limit, and go when their node is
	// gone. nil while there are none.
	away map[string]*Window
	// For a window after the last Import, LateAccountHorizon at least
	// (until logUntil), a late account of the state imported (Replace)
	// starts from what was applied since:
	// awayLog is every other node's slot deltas, awayDropped the nodes
	// dropped (away.go), and ownChanges the changes to this node's own
	// slots, per bucket: admissions, releases and deltas (nil when not
	// kept; state.go, replaceOwnSlots).
	awayLog     map[string][]Bucket
	awayDropped map[string]bool
	ownChanges  *Window
	logUntil    int64
	history     rebuckets // for tickets admitted before a Rebucket (rebucket.go)

	// onChange, if set, is called once at the first change after the
	// tenant was made or found empty by ExportOrArm (armed): whoever saves
	// busy tenants hears of each one without looking at every idle one.
	onChange func()
	armed    bool

	// This node's calls admitted since the last Import, by slot bucket,
	// counted apart from its others for as long as a release of one of
	// those could take their slots (ownslots.go; nil when not kept), and
	// the newest slot bucket at the Import (freshFrom). imports counts the
	// Imports, and a ticket keeps the count it was admitted under.
	fresh     *Window
	freshFrom int64
	imports   uint16
}

// OnChange sets f to be called, under the tenant's lock (f must not call
// the tenant), at its next change, and again at the first change after
// each ExportOrArm that finds it empty. A tenant with a state already
// counts as changed.
func (t *Tenant) OnChange(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onChange, t.armed = f, true
	if !t.emptyLocked() {
		t.changed()
	}
}

// changed fires onChange if armed (under the lock).
func (t *Tenant) changed() {
	if t.armed && t.onChange != nil {
		t.armed = false
		t.onChange()
	}
}

// NewTenant returns a tenant whose rpm/tpm are enforced over window and whose
// concurrency slots expire after slotTTL if never released.
func NewTenant(l Limits, window, slotTTL time.Duration) *Tenant {
	return &Tenant{
		limits:   l,
		requests: NewWindow(l.Requests, window),
		tokens:   NewWindow(l.Tokens, window),
		slots:    NewWindow(l.Concurrency, slotTTL),
	}
}

// Limits reports the tenant's limits.
func (t *Tenant) Limits() Limits {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.limits
}

// Admit decides whether one request estimated at tokens fits all three
// dimensions at now (Unix nanoseconds, >= 0). If it does, all three are
// charged at once and the ticket must later go to Finish (or Settle and
// Release); if not, nothing is charged.
func (t *Tenant) Admit(now, tokens int64) (tk Ticket, d Decision) {
	t.AdmitTo(now, tokens, &tk, &d)
	return tk, d
}

// AdmitTo is Admit writing its ticket and decision to tk and d: a caller
// that keeps them (a call's levels) is spared copying both on the way.
func (t *Tenant) AdmitTo(now, tokens int64, tk *Ticket, d *Decision) {
	*d = Decision{}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	t.decide(now, tokens, d)
	if !d.Allowed {
		*tk = Ticket{}
	} else {
		// chargeAdmitted, written out: the call cost the decision
		// 10 ns of its ~90 (BenchmarkDecision).
		*tk = Ticket{
			bucket:     t.requests.charge(1),
			slotBucket: t.slots.charge(1),
			tokens:     tokens,
			admitted:   true,
			gen:        t.history.gen,
			imports:    t.imports,
		}
		t.tokens.charge(tokens)
		if t.ownChanges != nil {
			t.ownChanges.record(tk.slotBucket, 1)
		}
		if t.fresh != nil {
			t.fresh.adjust(tk.slotBucket, 1)
		}
		t.changed()
	}
	t.fill(now, d)
}

// chargeAdmitted charges an admitted request; t.mu is held and t advanced.
func (t *Tenant) chargeAdmitted(tokens int64) Ticket {
	tk := Ticket{
		bucket:     t.requests.charge(1),
		slotBucket: t.slots.charge(1),
		tokens:     tokens,
		admitted:   true,
		gen:        t.history.gen,
		imports:    t.imports,
	}
	t.tokens.charge(tokens)
	if t.ownChanges != nil {
		t.ownChanges.record(tk.slotBucket, 1)
	}
	if t.fresh != nil {
		t.fresh.adjust(tk.slotBucket, 1)
	}
	t.changed()
	return tk
}

// AdmitBeside is Admit for an owner that shares members of the cluster
// cannot reach: each of them admits on its fallback share, limit / members
// (rounded down; a share of 0 admits nothing), so the owner keeps to what
// those shares leave of each limit. Together they stay within it, and the
// owner keeps at least a share's worth (shares < members). The decision's
// limits and remaining are the whole ones; a refusal's retry is when the
// request fits in what is kept.
func (t *Tenant) AdmitBeside(now, tokens, shares, members int64) (Ticket, Decision) {
	if shares <= 0 || members <= 0 {
		return t.Admit(now, tokens)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	var d Decision
	t.decide(now, tokens, &d)
	if d.Allowed {
		d = t.decideBeside(now, tokens, shares, members)
	}
	var tk Ticket
	if d.Allowed {
		tk = t.chargeAdmitted(tokens)
	}
	t.fill(now, &d)
	return tk, d
}

// decideBeside refuses what fits the limits but not what the shares
// leave of them; t.mu is held and t advanced to now.
func (t *Tenant) decideBeside(now, tokens, shares, members int64) Decision {
	var d Decision
	kept := func(l int64) int64 { return max(0, l-shares*(l/members)) }
	switch {
	case t.requests.limit > 0 && t.requests.total+1 > kept(t.requests.limit):
		d.Limited = Requests
		d.RetryAfter = time.Duration(t.requests.untilFits(now, 1+t.requests.limit-kept(t.requests.limit)))
	case t.tokens.limit > 0 && t.tokens.total+tokens > kept(t.tokens.limit):
		d.Limited = Tokens
		d.RetryAfter = time.Duration(t.tokens.untilFits(now, tokens+t.tokens.limit-kept(t.tokens.limit)))
	case t.slots.limit > 0 && t.slotsUsed()+1 > kept(t.slots.limit):
		d.Limited = Concurrency
		d.RetryAfter = time.Second
	default:
		d.Allowed = true
	}
	return d
}

// Check is what Admit would decide at now, charging nothing: a request
// waiting for other limits asks whether its tenant has room before it
// takes them.
func (t *Tenant) Check(now, tokens int64) Decision {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	var d Decision
	t.decide(now, tokens, &d)
	t.fill(now, &d)
	return d
}

// decide is Admit's decision, made in d (zero); t.mu is held and t
// advanced to now.
func (t *Tenant) decide(now, tokens int64, d *Decision) {
	switch {
	case t.frozen || t.sealed:
		// Another node counts this tenant now, or its decisions are made
		// on a shared budget: admitting here too would spend the same
		// headroom twice.
		d.Moved = true
	case !t.requests.fits(1):
		d.Limited = Requests
		d.RetryAfter = time.Duration(t.requests.untilFits(now, 1))
	case !t.tokens.fits(tokens):
		d.Limited = Tokens
		d.TooLarge = tokens > t.tokens.limit
		d.RetryAfter = time.Duration(t.tokens.untilFits(now, tokens))
	case !t.slotsFit():
		d.Limited = Concurrency
		d.RetryAfter = time.Duration(t.slots.untilFits(now, 1))
		if d.RetryAfter > time.Second || d.RetryAfter <= 0 {
			d.RetryAfter = time.Second
		}
	default:
		d.Allowed = true
	}
}

// Settle replaces the tokens charged for tk by actual: the difference is
// credited back, or the excess debited. It may be called more than once (the
// last call wins).
func (t *Tenant) Settle(now int64, tk *Ticket, actual int64) {
	if !tk.admitted || actual == tk.tokens {
		return
	}
	t.mu.Lock()
	t.advance(now)
	t.changed()
	t.tokens.adjust(t.history.bucket(tk), actual-tk.tokens)
	t.mu.Unlock()
	tk.tokens = actual
}

// Release frees tk's concurrency slot. Releasing twice is harmless.
func (t *Tenant) Release(now int64, tk *Ticket) {
	if !tk.admitted || tk.released {
		return
	}
	t.mu.Lock()
	t.advance(now)
	t.changed()
	t.releaseOwn(tk, t.history.slot(tk))
	t.mu.Unlock()
	tk.released = true
}

// Finish settles tk at actual tokens and releases its slot under one lock.
func (t *Tenant) Finish(now int64, tk *Ticket, actual int64) {
	if !tk.admitted {
		return
	}
	t.mu.Lock()
	t.finishLocked(now, tk, actual)
	t.mu.Unlock()
}

func (t *Tenant) finishLocked(now int64, tk *Ticket, actual int64) {
	t.advance(now)
	t.changed()
	if actual != tk.tokens {
		t.tokens.adjust(t.history.bucket(tk), actual-tk.tokens)
		tk.tokens = actual
	}
	if !tk.released {
		t.releaseOwn(tk, t.history.slot(tk))
		tk.released = true
	}
}

// Cancel takes back what Admit charged for tk (its request, tokens and
// slot), for a request admitted here that another of its limits then
// refused: it is charged on all of them or none. The ticket is spent.
func (t *Tenant) Cancel(now int64, tk *Ticket) {
	t.CancelOrHand(now, tk)
}

// CancelOrHand is Cancel for a tenant that may have been handed over since
// tk was admitted (Freeze): then the state handed over holds the charge,
// nothing is taken back here, and the delta that takes it back is returned
// for the new owner, with handed true.
func (t *Tenant) CancelOrHand(now int64, tk *Ticket) (d Delta, handed bool) {
	if !tk.admitted {
		return Delta{}, false
	}
	t.mu.Lock()
	t.advance(now)
	t.changed()
	b, slot := t.history.buckets(tk)
	if t.frozen {
		d = Delta{Bucket: b, SlotBucket: slot, Requests: -1, Tokens: -tk.tokens}
		if !tk.released {
			d.Slots = -1
			t.handOwn(tk, slot)
		}
		handed = true
	} else {
		t.requests.adjust(b, -1)
		t.tokens.adjust(b, -tk.tokens)
		if !tk.released {
			t.releaseOwn(tk, slot)
		}
	}
	t.mu.Unlock()
	*tk = Ticket{}
	return d, handed
}

// Usage is a point-in-time view of a tenant for admin endpoints.
type Usage struct {
	Requests, Tokens, InFlight int64
	Limits                     Limits
}

// Usage reports what the windows hold at now.
func (t *Tenant) Usage(now int64) Usage {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	return Usage{
		Requests: t.requests.used(),
		Tokens:   t.tokens.used(),
		InFlight: t.slotsUsed(),
		Limits:   t.limits,
	}
}

// Peek fills the header values of a decision without admitting anything, for
// answers that carry the headers but did not ask for admission.
func (t *Tenant) Peek(now int64) Decision {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	var d Decision
	t.fill(now, &d)
	return d
}

func (t *Tenant) advance(now int64) {
	if cur, ok := t.requests.due(now); ok {
		t.requests.roll(cur)
	}
	if cur, ok := t.tokens.due(now); ok {
		t.tokens.roll(cur)
	}
	if cur, ok := t.slots.due(now); ok {
		t.slots.roll(cur)
	}
	if len(t.away) > 0 { // ranging over an empty map is not free
		for _, w := range t.away {
			w.advance(now)
		}
	}
	if t.fresh != nil {
		t.advanceFresh(now)
	}
	if t.ownChanges != nil {
		if now >= t.logUntil {
			t.ownChanges = nil // a window past the Import: not read again
		} else {
			t.ownChanges.advance(now)
		}
	}
}

func (t *Tenant) fill(now int64, d *Decision) {
	d.LimitRequests = t.requests.limit
	d.RemainingRequests = t.requests.remaining()
	d.ResetRequests = time.Duration(t.requests.untilEmpty(now))
	d.LimitTokens = t.tokens.limit
	d.RemainingTokens = t.tokens.remaining()
	d.ResetTokens = time.Duration(t.tokens.untilEmpty(now))
	d.LimitConcurrency = t.slots.limit
	d.InFlight = t.slotsUsed()
}

// SetLimits changes the limits in place, keeping what the windows hold: a
// reload does not hand a tenant a fresh window.
func (t *Tenant) SetLimits(l Limits) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.limits = l
	t.requests.limit = l.Requests
	t.tokens.limit = l.Tokens
	t.slots.limit = l.Concurrency
}
