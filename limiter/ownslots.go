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
// concurrency until that call ended (found by a reviewer, 3 calls for 2).
//
// So a release of another call never takes a bucket below its fresh
// calls, and what it could not take waits in uncounted: the call it was
// for is counted nowhere yet, and may be by a late account (Replace) or by
// its admission's delta arriving after its end, which then frees it at
// once. Both are kept while the newest slot bucket at the Import
// (freshFrom) still counts: the other calls' slots are no newer, so after
// that their releases land on no bucket that counts.

// startFresh begins counting the calls admitted here apart, at an Import,
// after the state was merged. t.mu is held.
func (t *Tenant) startFresh() {
	t.imports++
	t.fresh, t.uncounted = t.emptySlotWindow(), t.emptySlotWindow()
	t.freshFrom = t.slots.head
}

// dropFresh stops counting them apart.
func (t *Tenant) dropFresh() { t.fresh, t.uncounted = nil, nil }

// advanceFresh rolls fresh and uncounted with the slots window (advanced
// already), and drops them once freshFrom left it.
func (t *Tenant) advanceFresh(now int64) {
	if t.freshFrom < t.slots.oldest() {
		t.dropFresh()
		return
	}
	t.fresh.advance(now)
	t.uncounted.advance(now)
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
	switch {
	case t.fresh == nil:
		t.adjustOwnSlots(b, n)
	case n < 0:
		t.releaseOther(b, n)
	case n > 0:
		// An admission reported after its end: the end is waiting.
		waiting := min(n, t.uncounted.value(b))
		t.uncounted.adjust(b, -waiting)
		t.slots.adjust(b, n-waiting)
		if t.ownChanges != nil {
			t.ownChanges.record(b, n)
		}
	}
}

// releaseOther takes n (< 0) slots of calls that are not fresh from bucket
// b, never its fresh calls' slots: what it cannot take waits in uncounted.
// A late account (ownChanges) loses the whole release: it may count the
// call.
func (t *Tenant) releaseOther(b, n int64) {
	if t.ownChanges != nil {
		t.ownChanges.record(b, n)
	}
	if !t.slots.live(b) {
		return // its slot already expired
	}
	taken := max(n, -max(0, t.slots.value(b)-t.fresh.value(b)))
	t.slots.adjust(b, taken)
	t.uncounted.adjust(b, taken-n)
}

// settleOwnSlots makes the own slots a Replace gives (t.slots holds the
// late account's) at least the fresh calls', bucket by bucket. With
// changes (ownChanges, every change since the Import), they are the
// account's plus the changes, and a release that takes them below the
// fresh calls waits (uncounted) instead; without, the releases waiting
// take what the account counts. t.fresh is not nil.
func (t *Tenant) settleOwnSlots(changes *Window) {
	w := &t.slots
	for b := w.oldest(); b <= w.head; b++ {
		fresh, waiting, slots := t.fresh.value(b), t.uncounted.value(b), w.value(b)
		if changes != nil {
			slots += changes.value(b) // every release taken whole: may be < 0
			waiting = 0
		}
		take := min(waiting, max(0, slots-fresh))
		waiting -= take
		slots -= take
		if slots < fresh {
			waiting += fresh - slots
			slots = fresh
		}
		w.adjust(b, slots-w.value(b))
		t.uncounted.adjust(b, waiting-t.uncounted.value(b))
	}
}
