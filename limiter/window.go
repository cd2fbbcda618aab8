package limiter

import "time"

// Buckets is how many buckets span one window. A charge is counted for between
// one window and one window plus one bucket, so under saturating demand a
// window admits at least Buckets/(Buckets+1) ≈ 99.2 % of its limit over time.
const Buckets = 128

// ring holds one bucket more than Buckets: the bucket that straddles the
// window's trailing edge is kept whole, which is what makes the count
// conservative.
const ring = Buckets + 1

// Window is a sliding-window counter with O(1) memory and amortised O(1) time.
// It is not safe for concurrent use; Tenant serialises access.
type Window struct {
	limit  int64 // <= 0: unlimited (still counted, for reporting)
	width  int64 // bucket width in nanoseconds
	head   int64 // absolute index of the newest bucket seen
	newest int64 // absolute index of the newest bucket holding a charge
	total  int64 // sum of the live buckets
	// The buckets are made at the first charge and dropped once nothing
	// was charged for a whole window: an idle tenant's window costs a few
	// words (a node configured with 100 000 tenants holds 6 windows each).
	// While at most fewMax slots hold a charge they are kept in few (64
	// bytes); past that in buckets (1 KiB), the ring itself. Most tenants
	// of a big gateway send a few requests a window.
	few     *fewBuckets
	buckets *[ring]int64
}

// fewMax is how many charged slots the compact form holds.
const fewMax = 6

// fewBuckets is a window's ring while few of its slots hold a charge:
// slot[k] holds val[k], for k < n.
type fewBuckets struct {
	n    int8
	slot [fewMax]uint8
	val  [fewMax]int64
}

// at is the charge in ring slot i.
func (w *Window) at(i int64) int64 {
	switch {
	case w.buckets != nil:
		return w.buckets[i]
	case w.few != nil:
		f, s := w.few, uint8(i)
		for k := f.n - 1; k >= 0; k-- { // newest first: mostly the head's
			if f.slot[k] == s {
				return f.val[k]
			}
		}
	}
	return 0
}

// add adds v to ring slot i (the caller keeps total).
func (w *Window) add(i, v int64) {
	if w.buckets != nil {
		w.buckets[i] += v
		return
	}
	if v == 0 {
		return
	}
	if w.few == nil {
		w.few = new(fewBuckets)
	}
	f, s := w.few, uint8(i)
	for k := f.n - 1; k >= 0; k-- { // newest first: mostly the head's
		if f.slot[k] == s {
			f.val[k] += v
			return
		}
	}
	if f.n < fewMax {
		f.slot[f.n], f.val[f.n] = s, v
		f.n++
		return
	}
	// A slot more than the compact form holds: the whole ring.
	w.buckets = new([ring]int64)
	for k := range f.n {
		w.buckets[f.slot[k]] = f.val[k]
	}
	w.few = nil
	w.buckets[i] += v
}

// clear empties ring slot i and returns what it held.
func (w *Window) clear(i int64) int64 {
	if w.buckets != nil {
		v := w.buckets[i]
		w.buckets[i] = 0
		return v
	}
	if f := w.few; f != nil {
		for k := range f.n {
			if int64(f.slot[k]) == i {
				v := f.val[k]
				f.n--
				f.slot[k], f.val[k] = f.slot[f.n], f.val[f.n]
				return v
			}
		}
	}
	return 0
}

// drop lets the buckets go.
func (w *Window) drop() { w.buckets, w.few = nil, nil }

// held reports whether the window holds buckets (either form).
func (w *Window) held() bool { return w.buckets != nil || w.few != nil }

// NewWindow returns a window of the given length and limit. A length shorter
// than Buckets nanoseconds is rounded up so a bucket is never empty of time.
func NewWindow(limit int64, length time.Duration) Window {
	width := int64(length) / Buckets
	if width < 1 {
		width = 1
	}
	return Window{limit: limit, width: width}
}

// Limit reports the configured limit (<= 0 means none).
func (w *Window) Limit() int64 { return w.limit }

// Length reports the span the window enforces.
func (w *Window) Length() time.Duration { return time.Duration(w.width * Buckets) }

// advance moves the window to now, dropping buckets that left it. Time that
// runs backwards (a clock step) is treated as the newest time already seen.
func (w *Window) advance(now int64) {
	if cur, ok := w.due(now); ok {
		w.roll(cur)
	}
}

// due is now's bucket, and whether the head must roll to it: inlined on
// the decision's path, where most calls stay in the head bucket.
func (w *Window) due(now int64) (int64, bool) {
	cur := now / w.width
	return cur, cur > w.head
}

// roll moves the head to bucket cur (> head), dropping what left.
func (w *Window) roll(cur int64) {
	switch {
	case !w.held():
	case cur-w.head >= ring:
		w.drop()
		w.total = 0
	default:
		if f := w.few; f != nil {
			// The slots of (head, cur]: those at most cur-head past head.
			for k := int8(0); k < f.n; {
				if ((int64(f.slot[k])-w.head-1)%ring+ring)%ring < cur-w.head {
					w.total -= w.clear(int64(f.slot[k]))
					continue // k now holds the last entry
				}
				k++
			}
		} else {
			for i := w.head + 1; i <= cur; i++ {
				w.total -= w.clear(i % ring)
			}
		}
		if w.total == 0 && cur-w.newest >= ring {
			// Nothing charged for a whole window (charges are never
			// negative): a slot window whose calls all ended keeps its
			// buckets while calls keep coming.
			w.drop()
		}
	}
	w.head = cur
}

// fits reports whether n more fits under the limit, after advance.
func (w *Window) fits(n int64) bool {
	return w.limit <= 0 || w.total+n <= w.limit
}

// charge adds n to the newest bucket and returns that bucket's index, which
// the caller keeps to adjust the charge later.
func (w *Window) charge(n int64) int64 {
	w.add(w.head%ring, n)
	w.total += n
	if n > 0 {
		w.newest = w.head
	}
	return w.head
}

// oldest is the oldest bucket that still counts. Bucket indexes start at 0
// (time is Unix nanoseconds, never negative): in the first window after 0
// the ring is not yet full, and an index below 0 would be a negative ring
// slot.
func (w *Window) oldest() int64 {
	return max(w.head-ring+1, 0)
}

// live reports whether the bucket at absolute index b still counts.
func (w *Window) live(b int64) bool {
	return b <= w.head && b >= w.oldest()
}

// value is the charge in bucket b, 0 when b is not live.
func (w *Window) value(b int64) int64 {
	if !w.live(b) {
		return 0
	}
	return w.at(b % ring)
}

// adjust changes the charge made in bucket b by delta. A credit for a bucket
// that already left the window is dropped (it no longer counts anyway); a
// debit for one is charged now, because the usage is real and must weigh on
// the window that follows.
func (w *Window) adjust(b, delta int64) {
	switch {
	case delta == 0:
	case w.live(b):
		slot := b % ring
		if v := w.at(slot); v+delta < 0 {
			delta = -v
		}
		w.add(slot, delta)
		w.total += delta
		if delta > 0 && b > w.newest {
			w.newest = b
		}
	case delta > 0:
		w.charge(delta)
	}
}

// Used reports the charges inside the window, after advance.
func (w *Window) used() int64 { return w.total }

// remaining reports how much more fits, after advance (unlimited: -1).
func (w *Window) remaining() int64 {
	if w.limit <= 0 {
		return -1
	}
	if r := w.limit - w.total; r > 0 {
		return r
	}
	return 0
}

// expiry is when a charge in bucket b stops counting.
func (w *Window) expiry(b int64) int64 {
	return (b + ring) * w.width
}

// untilFits is how long until n more fits, after advance. If n can never fit
// (it exceeds the limit on its own) it returns a whole window.
func (w *Window) untilFits(now, n int64) int64 {
	if w.fits(n) {
		return 0
	}
	if n > w.limit {
		return w.width * Buckets
	}
	excess := w.total + n - w.limit
	for b := w.oldest(); b <= w.head; b++ {
		excess -= w.at(b % ring)
		if excess <= 0 {
			return w.expiry(b) - now
		}
	}
	return w.width * Buckets
}

// untilEmpty is how long until every charge now counted has expired.
func (w *Window) untilEmpty(now int64) int64 {
	if w.total <= 0 || !w.live(w.newest) {
		return 0
	}
	return w.expiry(w.newest) - now
}
