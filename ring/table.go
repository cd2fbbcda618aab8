package ring

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultDebounce is the quiet period Table waits for by default before it
// rebuilds the ring after a membership event.
const DefaultDebounce = 50 * time.Millisecond

// maxWaitFactor caps how long a stream of events can postpone a rebuild:
// at most maxWaitFactor × debounce after the first unapplied Update.
const maxWaitFactor = 4

// Table holds the current Ring of one node and replaces it as the member set
// changes. Current is lock-free; versions only grow. All methods are safe for
// concurrent use.
type Table struct {
	self     string
	debounce time.Duration
	onChange func(from, to *Ring)

	cur atomic.Pointer[Ring]

	mu sync.Mutex
	// target is the member set the table converges to without further
	// updates: the set of the last ring built or being built.
	target  []string
	pending []string // latest set from Update, valid if dirty
	dirty   bool
	first   time.Time // arrival of the oldest unapplied Update
	last    time.Time // arrival of the newest unapplied Update
	closed  bool
	// pins are the Pins every ring built from now holds; pinsDirty: a
	// ring with them is still to be built (SetPins).
	pins      Pins
	pinsDirty bool

	kick  chan struct{}      // cap 1: "pending changed"
	flush chan chan struct{} // Flush requests
	quit  chan struct{}      // closed by Close
	done  chan struct{}      // closed when the worker exits
}

// NewTable returns a table for the node named self, holding an empty ring of
// version 0. Membership events passed to Update are coalesced: the ring is
// rebuilt once no Update has arrived for debounce (DefaultDebounce if
// debounce <= 0), and at the latest 4 × debounce after the first one.
//
// onChange, if not nil, is called after each new ring is published, with the
// previous and the new ring, in version order, from one goroutine owned by
// the table, never concurrently with itself. It may take its time (updates
// arriving meanwhile are coalesced) but must not call Flush or Close on the
// same table, which wait for it.
func NewTable(self string, debounce time.Duration, onChange func(from, to *Ring)) *Table {
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	t := &Table{
		self:     self,
		debounce: debounce,
		onChange: onChange,
		kick:     make(chan struct{}, 1),
		flush:    make(chan chan struct{}),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	t.cur.Store(build(0, nil))
	go t.run()
	return t
}

// Self returns the name of the local node given to NewTable.
func (t *Table) Self() string { return t.self }

// Current returns the current ring; never nil. Take one snapshot per
// decision: two calls may return different rings.
func (t *Table) Current() *Ring { return t.cur.Load() }

// Update records the full set of live active members. It copies members,
// never blocks on a rebuild or on onChange, and may be called from gossip
// callbacks. A set equal to the current one yields no new version. After
// Close it does nothing.
func (t *Table) Update(members []string) {
	names := normalize(members)
	now := time.Now()

	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	if equalSets(names, t.target) {
		// Back to (or still at) what we have or are building: nothing
		// to do, and a pending different set is cancelled; a ring with
		// new pins (SetPins) is still due.
		if t.pinsDirty {
			t.pending = t.target
		} else {
			t.dirty, t.pending = false, nil
		}
		t.mu.Unlock()
		return
	}
	if !t.dirty {
		t.first = now
	}
	t.pending, t.dirty, t.last = names, true, now
	t.mu.Unlock()

	select {
	case t.kick <- struct{}{}:
	default: // the worker has a kick waiting already
	}
}

// SetPins gives the rings built from now on the pins p (the caller must
// not change p afterwards). If they place any name differently, a ring of
// the same members with p is built, as for a member change: onChange
// reports it, so tenants that moved are handed over like in any change.
func (t *Table) SetPins(p Pins) {
	now := time.Now()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.pins = p
	if t.cur.Load().Len() == 0 && !t.dirty {
		// No ring owns anything yet: the first one is built with p.
		t.mu.Unlock()
		return
	}
	t.pinsDirty = true
	if !t.dirty {
		t.pending, t.dirty, t.first = t.target, true, now
	}
	t.last = now
	t.mu.Unlock()
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// Flush applies a pending update now, without waiting for the debounce, and
// returns after the new ring is published and onChange has returned. It does
// nothing after Close. Must not be called from onChange.
func (t *Table) Flush() {
	ack := make(chan struct{})
	select {
	case t.flush <- ack:
		<-ack
	case <-t.done:
	}
}

// Close stops the table: pending updates are dropped, and once Close returns
// onChange is not called again (a call in progress is waited for). Current
// keeps returning the last ring. Close is idempotent; it must not be called
// from onChange.
func (t *Table) Close() {
	t.mu.Lock()
	if !t.closed {
		t.closed = true
		t.dirty, t.pending = false, nil
		close(t.quit)
	}
	t.mu.Unlock()
	<-t.done
}

// run is the single goroutine that builds, publishes and reports rings.
func (t *Table) run() {
	defer close(t.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-t.quit:
			return
		case <-t.kick:
			if wait, ok := t.due(); ok {
				// Go ≥ 1.23 timers: Reset drops any stale expiry.
				timer.Reset(wait)
			}
		case <-timer.C:
			wait, ok := t.due()
			if !ok {
				continue
			}
			if wait > 0 {
				timer.Reset(wait)
				continue
			}
			t.apply()
		case ack := <-t.flush:
			timer.Stop()
			t.apply()
			close(ack)
		}
	}
}

// due returns how long to wait before applying the pending update, and
// whether there is one.
func (t *Table) due() (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.dirty || t.closed {
		return 0, false
	}
	at := t.last.Add(t.debounce)
	if latest := t.first.Add(maxWaitFactor * t.debounce); latest.Before(at) {
		at = latest
	}
	return time.Until(at), true
}

// apply builds a ring from the pending set, publishes it and reports it.
// Only the worker goroutine calls it, so versions are assigned and published
// in order.
func (t *Table) apply() {
	t.mu.Lock()
	if !t.dirty || t.closed {
		t.mu.Unlock()
		return
	}
	names, pins := t.pending, t.pins
	t.target = names
	t.dirty, t.pending, t.pinsDirty = false, nil, false
	t.mu.Unlock()

	from := t.cur.Load()
	if from.sameMembers(names) && from.samePins(pins) {
		return
	}
	to := build(from.version+1, names)
	to.pins = pins
	// If Close was called while we built, neither publish nor report:
	// Current keeps the last ring onChange was told about. (Close waits
	// for this goroutine, so a callback that starts after this check
	// still ends before Close returns.)
	select {
	case <-t.quit:
		return
	default:
	}
	t.cur.Store(to)
	if t.onChange != nil {
		t.onChange(from, to)
	}
}

func equalSets(a, b []string) bool { return slices.Equal(a, b) }
