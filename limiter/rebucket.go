package limiter

import (
	"math"
	"time"
)

// Rebucketing: a reload that changes the window or the slot TTL changes the
// bucket width of a tenant's windows. Rebucket moves what the windows count
// to buckets of the new width, in place, instead of starting the tenant from
// empty windows (which would admit a whole new window on top of the one just
// spent, and let calls in flight release slots nobody charged).
//
// Where a charge goes. A charge made at time t sits in old bucket b, so
// b·w1 <= t < (b+1)·w1, and counts under the old window until
// E1 = (b+ring)·w1 >= t + L1 (L = Buckets·w is the window a width enforces).
// Rebucket moves it to the new bucket holding the END of b's span,
//
//	n = ⌊((b+1)·w1 − 1) / w2⌋  (clamped to the new head, see below),
//
// where it counts until E2 = (n+ring)·w2. Since n·w2 <= (b+1)·w1 − 1 <
// (n+1)·w2:
//
//	(b+1)·w1 + L2  <=  E2  <=  (b+1)·w1 + L2 + w2
//
// so a charge counts for at least the new window from when it was made (and at
// most one new bucket more than that, from the end of its old bucket). That is
// all a decision under the new window needs: a decision at s must see every
// charge made in (s − L2, s], and then no trailing interval of length L2 that
// holds a decision made after the reload holds more than the limit.
//
//   - New window not shorter (L2 >= L1): E2 >= (b+1)·w1 + L1 = E1, so every
//     charge also counts at least as long as it did before. The newest old
//     bucket's span may reach past now; the new head is then moved to the
//     bucket holding its end, less than one new bucket ahead (charges made
//     before time catches up count from that bucket: later, so longer).
//   - New window shorter (L2 < L1): a charge can stop counting before E1 (by
//     up to L1 − L2), but never before t + L2. That is correct for the window
//     now configured: after t + L2 no interval of the new length that holds a
//     new decision contains t, and the old, longer window is no longer the
//     promise. Keeping every charge until E1 would enforce the old window one
//     more window for nothing the new one needs. Here the newest old bucket's
//     span reaches past now, and putting it at its end could be many new
//     buckets ahead (1 h → 1 s: 28 s); it goes to the bucket holding now
//     instead, which still gives E2 > now + L2 >= t + L2. (After a clock step
//     back the end of the newest bucket is used: its charges may be as late.)
//   - Old buckets that map to a bucket already out of the new window have
//     E2 <= now: nothing after now needs them.
//
// What the old window had already dropped is gone: with a longer new window,
// an interval of the new length reaching back past the old window may hold
// charges the limiter no longer knew (any limiter started then would not
// know them either). The slots window is rebucketed the same way with the
// slot TTL: a slot never released counts until at least its admission plus
// the new TTL, and at least until its old expiry if the TTL grew.
//
// Tickets. Calls in flight hold tickets that name the buckets they were
// charged in, as indexes of the width they were admitted under. Every ticket
// carries the tenant's generation (the number of rebuckets) at admission,
// and the tenant keeps the maps of its last maxRebuckets rebuckets. The
// invariant: a ticket admitted at generation g is adjusted (Settle, Release,
// Finish, FinishOrHand's delta) in the bucket its charge is in now, which is
// its bucket taken through the maps of every rebucket since g — the same maps
// that moved the bucket's content. So a slot released after a reload frees
// the slot it took in the tenant's current windows, and a credit or debit
// lands there too, exactly once (the ticket's released flag and token count
// see to that, as without a reload). A bucket that has since left the window
// behaves like any bucket that did: a credit is dropped, a debit charged now,
// a release dropped (the slot already expired). Rebucket changes the tenant in
// place, so whoever holds it (calls in flight, requests that loaded the
// state before the reload, the handoff) sees the new windows at once.

// maxRebuckets bounds the rebuckets a tenant remembers for its tickets. A
// ticket older than that is settled as if its buckets had left the window:
// conservative for the windows, but its slot stays counted until the slot
// TTL frees it.
const maxRebuckets = 16

// deadBucket is an index no window ever holds: adjusting it drops a credit
// and charges a debit now.
const deadBucket = math.MinInt64

// remap takes one window's bucket indexes from one width to another, as
// Rebucket moved its content.
type remap struct {
	from, to int64 // bucket widths before and after, ns
	head     int64 // the newest bucket before (old width)
	top      int64 // the newest bucket after: nothing maps later
}

func (m remap) identity() bool { return m.from == m.to }

// index is where the content of old bucket b is now (deadBucket if it had
// already left the old window).
func (m remap) index(b int64) int64 {
	switch {
	case m.identity():
		return b
	case b <= m.head-ring || b > m.head:
		return deadBucket
	}
	return min(((b+1)*m.from-1)/m.to, m.top)
}

// remapTo is the map that gives w the width of a window of length at now,
// after advance.
func (w *Window) remapTo(now int64, length time.Duration) remap {
	to := max(int64(length)/Buckets, 1)
	m := remap{from: w.width, to: to, head: w.head, top: w.head}
	if m.identity() {
		return m
	}
	latest := now
	if to > w.width || now < w.head*w.width {
		// Not shorter (the end of the newest bucket is less than one new
		// bucket ahead), or the clock stepped back (charges in the newest
		// bucket may be as late as its end).
		latest = max(now, (w.head+1)*w.width-1)
	}
	m.top = latest / to
	return m
}

// rebucket moves w's content to buckets of the width m maps to.
func (w *Window) rebucket(m remap) {
	if m.identity() {
		return
	}
	old := Window{few: w.few, buckets: w.buckets} // the content, to read from
	lo, hi := w.oldest(), w.head
	w.width, w.head, w.newest, w.total = m.to, m.top, 0, 0
	w.drop()
	if !old.held() {
		return
	}
	for b := lo; b <= hi; b++ {
		v := old.at(b % ring)
		if v == 0 {
			continue
		}
		n := m.index(b)
		if n < w.oldest() {
			continue // out of the new window already
		}
		w.add(n%ring, v)
		w.total += v
		if v > 0 && n > w.newest {
			w.newest = n
		}
	}
}

// rebucketStep is one Rebucket: the map of the request and token windows
// (they share a width and a head) and that of the slots window.
type rebucketStep struct{ window, slots remap }

// rebuckets is a tenant's rebucket history, for settling tickets admitted
// before the last ones.
type rebuckets struct {
	gen   uint32         // rebuckets so far; stamped on every ticket
	steps []rebucketStep // the last ones: steps[len-k] took generation gen-k to gen-k+1
}

func (r *rebuckets) push(s rebucketStep) {
	if len(r.steps) == maxRebuckets {
		r.steps = append(r.steps[:0], r.steps[1:]...)
	}
	r.steps = append(r.steps, s)
	r.gen++
}

// buckets are tk's request/token bucket and slot bucket in the tenant's
// current windows.
func (r *rebuckets) buckets(tk *Ticket) (bucket, slot int64) {
	if tk.gen == r.gen {
		return tk.bucket, tk.slotBucket
	}
	back := r.gen - tk.gen
	if back > uint32(len(r.steps)) {
		return deadBucket, deadBucket
	}
	bucket, slot = tk.bucket, tk.slotBucket
	for _, s := range r.steps[len(r.steps)-int(back):] {
		bucket, slot = s.window.index(bucket), s.slots.index(slot)
	}
	return bucket, slot
}

// Deltas. A delta names its call's buckets by indexes of the width the
// call was admitted under, unless the node that made it took them through
// its history (FinishOrHand and CancelOrHand do). FinishDelta, DeltaOf and
// SettleDelta see no tenant: for a ticket of a fallback share, or a Tally,
// admitted before a reload and reported after it, they name buckets of the
// old width, where the receiver's windows have moved on (the release of a
// call that ended held its slot until the slot TTL, the credit was lost).
// So the receiver takes each index a delta names to where that bucket's
// content is now (inWindows): an index that is not of its current windows
// (neither live nor just ahead, clock.go) but lies in the window a recent
// Rebucket moved is of that rebucket's old width, the sender's too when the
// reload gave both nodes the same settings, and goes through the maps of
// that rebucket and those after it. The windows of two widths hold indexes
// apart: at Unix time t they overlap only if the widths differ by less than
// about ring·w²/t (16 ns for a minute's window). What stays ambiguous: a
// reload back to a width used less than a window before (an index of the
// earlier spell is taken as current, where its content may have moved up
// to a bucket later, or to the head), clocks near 0 (tests), and a delta
// made under a width the receiver has not rebucketed to yet (a reload
// reaching the sender first), which no history here can map. A delta that
// carried the widths of its indexes would need no inference (a wire
// change).

// inWindows is where the content of bucket b, named by a delta, is in w
// (the request and token windows, or with slots the slots windows).
func (r *rebuckets) inWindows(b int64, w *Window, slots bool) int64 {
	if len(r.steps) == 0 || (b >= w.oldest() && b <= w.head+maxAhead) {
		return b
	}
	mapOf := func(s rebucketStep) remap {
		if slots {
			return s.slots
		}
		return s.window
	}
	for k := len(r.steps) - 1; k >= 0; k-- {
		if m := mapOf(r.steps[k]); m.identity() || b <= m.head-ring || b > m.head {
			continue
		}
		for _, s := range r.steps[k:] {
			b = mapOf(s).index(b)
		}
		return b
	}
	return b
}

// bucket is tk's request and token bucket in the current windows.
func (r *rebuckets) bucket(tk *Ticket) int64 {
	b, _ := r.buckets(tk)
	return b
}

// slot is tk's slot bucket in the current slots window.
func (r *rebuckets) slot(tk *Ticket) int64 {
	_, s := r.buckets(tk)
	return s
}

// Rebucket gives the tenant a new window and slot TTL at now, keeping what
// its windows count (see the comment at the top of rebucket.go for where
// each charge goes and why that is conservative) and keeping the tickets of
// calls in flight valid: their settlements and releases land in the buckets
// their charges were moved to. With the same bucket widths it changes
// nothing. Limits are unchanged (SetLimits).
func (t *Tenant) Rebucket(now int64, window, slotTTL time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	t.changed()
	s := rebucketStep{window: t.requests.remapTo(now, window), slots: t.slots.remapTo(now, slotTTL)}
	if s.window.identity() && s.slots.identity() {
		return
	}
	t.requests.rebucket(s.window)
	t.tokens.rebucket(s.window)
	t.slots.rebucket(s.slots)
	for _, w := range t.away { // advanced with slots: same head, same map
		w.rebucket(s.slots)
	}
	if t.ownChanges != nil {
		t.ownChanges.rebucket(s.slots)
	}
	if t.fresh != nil {
		t.fresh.rebucket(s.slots)
		if t.freshFrom = s.slots.index(t.freshFrom); t.freshFrom == deadBucket {
			t.fresh = nil
		}
	}
	t.history.push(s)
}
