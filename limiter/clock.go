package limiter

// The limiter's clock. A bucket index is a time, so a state or delta from
// another node also says what time it is on that node's clock. A node whose
// clock runs a few milliseconds ahead of this one's, at a moment when a
// bucket boundary falls between the two clocks, names a bucket ahead of this
// node's head. Counting such a charge in the head bucket instead would move
// it, while the call's later deltas still name the bucket it was charged
// in: once that bucket is live here it holds this node's own charges, and a
// credit or a release is taken from them (the charge moved stays counted,
// one bucket early, and the slot of a call that has ended stays held until
// the slot TTL).
//
// So the newest bucket a state or delta names counts as the newest time
// seen, as a local clock would: the windows roll to it, and this node's
// clock, now behind the head, is handled as a clock stepped back (its
// charges go to the head bucket until it catches up, later than true, so
// conservative). Every bucket then means the same on both nodes. Rolling
// early shortens how long this node's earlier charges count, by its own
// clock, by the difference between the clocks (by the writer's clock they
// count a whole window, as always).
//
// A bucket more than maxAhead buckets ahead is not taken as a clock: it is
// a writer with another bucket width (a reload not yet applied everywhere)
// or a clock so far off that rolling to it would forget this node's recent
// charges. It is counted in the head bucket, as before.
const maxAhead = Buckets / 16

// The request and token windows share a width and a head (rebucket.go), as
// the slots window, the away windows, ownChanges and fresh do: each group
// rolls as one.

// newestIn is the newest bucket of ws holding a charge, if ws has w's width
// (deadBucket otherwise, or if it holds none).
func (w *Window) newestIn(ws WindowState) int64 {
	newest := int64(deadBucket)
	if ws.Width != w.width {
		return newest
	}
	for _, b := range ws.Buckets {
		if b.Value > 0 {
			newest = max(newest, b.Index)
		}
	}
	return newest
}

// catchUpTo rolls w to bucket b if b is ahead of its head by at most
// maxAhead.
func (w *Window) catchUpTo(b int64) {
	if b > w.head && b-w.head <= maxAhead {
		w.roll(b)
	}
}

// catchUp rolls the request and token windows to bucket window and the
// slot windows to bucket slot, where these are ahead of the heads by at
// most maxAhead (deadBucket: nothing named). t.mu is held.
func (t *Tenant) catchUp(window, slot int64) {
	t.requests.catchUpTo(window)
	t.tokens.catchUpTo(window)
	t.slots.catchUpTo(slot)
	for _, w := range t.away {
		w.catchUpTo(slot)
	}
	if t.ownChanges != nil {
		t.ownChanges.catchUpTo(slot)
	}
	if t.fresh != nil {
		t.fresh.catchUpTo(slot)
	}
}

// catchUpState is catchUp to the newest buckets s names.
func (t *Tenant) catchUpState(s State) {
	slot := t.slots.newestIn(s.Slots)
	for _, ns := range s.Away {
		slot = max(slot, t.slots.newestIn(ns.Slots))
	}
	t.catchUp(max(t.requests.newestIn(s.Requests), t.tokens.newestIn(s.Tokens)), slot)
}

// catchUpDelta is catchUp to the buckets d changes.
func (t *Tenant) catchUpDelta(d Delta) {
	window, slot := int64(deadBucket), int64(deadBucket)
	if d.Requests != 0 || d.Tokens != 0 {
		window = d.Bucket
	}
	if d.Slots != 0 {
		slot = d.SlotBucket
	}
	t.catchUp(window, slot)
}
