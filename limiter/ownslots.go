package limiter

// This node's own slots after an Import. The slots window (t.slots) counts
// every call of this node: those admitted here since the last Import
// (fresh: their tickets carry the tenant's Import count), and the others,
// counted by the state imported or by the deltas this node reported to
// itself: a call admitted here before the Import, one of its fallback
// share's (ApplyFrom with from ""). When the state imported was stale (a
// crash takeover from an old snapshot), it may not count such a call, and
// its end, taken from the bucket its slot went to, would take the slot of
// a fresh call there instead: the tenant would run one call more than its
// concurrency until that call ends (3 calls for 2).
//
// So a release of another call never takes a bucket below its fresh
// calls; what it cannot take is dropped, as a release for an empty bucket
// is: the call it is for is counted nowhere here. A release carries its
// call's bucket, not the call: keeping what it cannot take for an account
// of its call that might come later (a late final, its admission's report
// arriving after its end) would let it take, instead, the slot of another
// call that account counts (3 calls for 2). If that account does come
// and counts the ended call, its slot is held until the slot TTL: the
// safe side. A late final within logUntil
// replays every release whole (ownChanges), which frees the ended call's
// slot when the final counts it, and takes another call's when it does
// not; each bucket keeps at least its fresh calls. These, and the calls
// admitted here losing that protection at the tenant's next Import (here
// or on another node, which cannot tell them from the others), are known
// limits (docs/limits.md) with one root: a release names a bucket, not a
// call.
//
// fresh is kept while the newest slot bucket at the Import (freshFrom)
// still counts: the other calls' slots are no newer, so after that their
// releases land on no bucket that counts.

// startFresh begins counting the calls admitted here apart, at an Import,
// after the state was merged. t.mu is held.
func (t *Tenant) startFresh() {
	t.imports++
	t.fresh = t.emptySlotWindow()
	t.freshFrom = t.slots.head
}

// advanceFresh rolls fresh with the slots window (advanced already), and
// drops it once freshFrom left that.
func (t *Tenant) advanceFresh(now int64) {
	if t.freshFrom < t.slots.oldest() {
		t.fresh = nil
		return
	}
	t.fresh.advance(now)
}

// isFresh reports whether tk was admitted here since the last Import.
func (t *Tenant) isFresh(tk *Ticket) bool { return tk.imports == t.imports }

// releaseOwn frees the slot of tk, a call admitted here, in slot bucket b.
func (t *Tenant) releaseOwn(tk *Ticket, b int64) {
	if t.fresh != nil {
		if !t.isFresh(tk) {
			t.releaseOther(b, -1)
			return
		}
		t.fresh.adjust(b, -1)
	}
	t.adjustOwnSlots(b, -1)
}

// handOwn is releaseOwn for a call whose end went to another node (the
// tenant was frozen): it runs here no more.
func (t *Tenant) handOwn(tk *Ticket, b int64) {
	if t.fresh != nil && t.isFresh(tk) {
		t.fresh.adjust(b, -1)
	}
}

// applyOwn adds n slots (a delta of this node's, from "") in bucket b.
func (t *Tenant) applyOwn(b, n int64) {
	if n < 0 && t.fresh != nil {
		t.releaseOther(b, n)
		return
	}
	t.adjustOwnSlots(b, n)
}

// releaseOther takes n (< 0) slots of calls that are not fresh from bucket
// b, never its fresh calls' slots. A late account (ownChanges) loses the
// whole release: it may count the call.
func (t *Tenant) releaseOther(b, n int64) {
	if t.ownChanges != nil {
		t.ownChanges.record(b, n)
	}
	t.slots.adjust(b, max(n, -max(0, t.slots.value(b)-t.fresh.value(b))))
}

// keepFresh raises each bucket of the own slots to its fresh calls, after
// a Replace: a late account that does not count a call whose end was
// replayed whole (ownChanges) would otherwise lose a fresh call's slot to
// it. t.fresh is not nil.
func (t *Tenant) keepFresh() {
	w := &t.slots
	for b := w.oldest(); b <= w.head; b++ {
		if short := t.fresh.value(b) - w.value(b); short > 0 {
			w.adjust(b, short)
		}
	}
}
