// Package audit counts arrivals in sliding windows: given the times at which
// requests (or tokens, as weighted events) reached a provider, it finds the
// most that any interval of a given length held, the most in the intervals
// a caller selects, how many fell between two instants, and how closely n
// consecutive arrivals were packed. The tests and the demo use it to prove
// that limits held from what the fake provider recorded.
//
// It owns the counting only: nothing of HTTP, gossip, Redis, the limiter or
// the fake provider's records. Callers turn their records into times (or
// Events) and interpret the numbers.
//
// # Intervals are half-open
//
// A window of length span is a half-open interval, [s, s+span) or
// equivalently (e-span, e]: two arrivals exactly span apart are never in the
// same window, and a window holds the arrivals a, b only if |b-a| < span.
// Every audit in the project counts this way, and it matches the limit
// being "n per window": a charge that leaves the window at exactly t+span
// no longer counts. A span <= 0 holds nothing.
//
// The maxima are over all such intervals, wherever they start: the busiest
// interval can always be slid until it starts at an arrival, so it is enough
// to look at the runs of consecutive arrivals (in time order) that start at
// each arrival. Every function takes its input in any order and does not
// modify it; the ones that need order sort a copy (O(n log n)), then scan
// with two pointers (O(n)).
package audit

import (
	"slices"
	"time"
)

// Window is a run of consecutive arrivals, in time order, that fits in one
// window: Last-First < span. The zero Window (Count 0) means none.
type Window struct {
	// Count is the number of arrivals in the run.
	Count int
	// Weight is their total weight: the sum of the Events' weights for
	// MaxWeightIn, Count for the functions over plain times.
	Weight int64
	// First and Last are the earliest and the latest arrival of the run:
	// it lies in [First, First+span) and in (Last-span, Last].
	First, Last time.Time
}

// Event is an arrival with a weight (1 per request, or its tokens).
type Event struct {
	At     time.Time
	Weight int64
}

// MaxIn returns the busiest window of length span: the run of arrivals with
// the largest Count, the earliest one if several tie.
func MaxIn(times []time.Time, span time.Duration) Window {
	best, _ := MaxInWhere(times, span, nil)
	return best
}

// MaxInAfter is MaxIn over the windows that end at an arrival after from:
// the runs whose Last arrival is after from, for audits of what reached the
// provider once something happened at from. A window whose arrivals are all
// at or before from is not counted, even if the interval reaches past from.
func MaxInAfter(times []time.Time, span time.Duration, from time.Time) Window {
	best, _ := MaxInWhere(times, span, func(w Window) bool { return w.Last.After(from) })
	return best
}

// MaxInWhere is MaxIn over the windows keep accepts (nil keeps all). The
// candidates are, for each arrival t, the window [t, t+span) and the run of
// every arrival in it (First is t); keep sees that whole run. It returns the
// kept run with the largest Count (the earliest if several tie) and how many
// candidates keep accepted.
func MaxInWhere(times []time.Time, span time.Duration, keep func(Window) bool) (best Window, considered int) {
	if span <= 0 {
		return Window{}, 0
	}
	ts := sortedTimes(times)
	j := 0
	for i, t := range ts {
		end := t.Add(span)
		for j < len(ts) && ts[j].Before(end) {
			j++
		}
		// ts[i] < end, so j > i: the run ts[i:j] holds at least t.
		w := Window{Count: j - i, Weight: int64(j - i), First: t, Last: ts[j-1]}
		if keep != nil && !keep(w) {
			continue
		}
		considered++
		if w.Count > best.Count {
			best = w
		}
	}
	return best, considered
}

// MaxWeightIn returns the window of length span with the largest total
// weight (the earliest if several tie; the zero Window if no window weighs
// more than 0). Weights are meant to be non-negative (requests, tokens): the
// candidates are the runs starting at each event, which covers every
// interval only when no weight is negative.
func MaxWeightIn(evs []Event, span time.Duration) Window {
	if span <= 0 {
		return Window{}
	}
	es := evs
	cmp := func(a, b Event) int { return a.At.Compare(b.At) }
	if !slices.IsSortedFunc(es, cmp) {
		es = slices.Clone(evs)
		slices.SortFunc(es, cmp)
	}
	var best Window
	var sum int64
	j := 0
	for i, e := range es {
		end := e.At.Add(span)
		for j < len(es) && es[j].At.Before(end) {
			sum += es[j].Weight
			j++
		}
		if sum > best.Weight {
			best = Window{Count: j - i, Weight: sum, First: e.At, Last: es[j-1].At}
		}
		sum -= e.Weight
	}
	return best
}

// CountIn counts the arrivals in [from, to).
func CountIn(times []time.Time, from, to time.Time) int {
	n := 0
	for _, t := range times {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

// WeightIn sums the weights of the events in [from, to).
func WeightIn(evs []Event, from, to time.Time) int64 {
	var sum int64
	for _, e := range evs {
		if !e.At.Before(from) && e.At.Before(to) {
			sum += e.Weight
		}
	}
	return sum
}

// ShortestRun returns the shortest time spanned by n consecutive arrivals
// (Last-First of the run), over the runs keep accepts (nil keeps all; keep
// sees the run's first and last arrival). ok is false if no run was
// accepted, or there are fewer than n arrivals, or n < 1. It is the dual of
// MaxIn: some window of length span holds n arrivals exactly when the
// shortest run of n is < span.
func ShortestRun(times []time.Time, n int, keep func(first, last time.Time) bool) (d time.Duration, ok bool) {
	if n < 1 {
		return 0, false
	}
	ts := sortedTimes(times)
	for i := 0; i+n-1 < len(ts); i++ {
		first, last := ts[i], ts[i+n-1]
		if keep != nil && !keep(first, last) {
			continue
		}
		if s := last.Sub(first); !ok || s < d {
			d, ok = s, true
		}
	}
	return d, ok
}

// sortedTimes returns times in time order: times itself if it already is,
// else a sorted copy.
func sortedTimes(times []time.Time) []time.Time {
	cmp := func(a, b time.Time) int { return a.Compare(b) }
	if slices.IsSortedFunc(times, cmp) {
		return times
	}
	ts := slices.Clone(times)
	slices.SortFunc(ts, cmp)
	return ts
}
