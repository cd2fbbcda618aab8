package audit

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// at returns t0 plus each offset in milliseconds.
func at(ms ...int) []time.Time {
	out := make([]time.Time, len(ms))
	for i, m := range ms {
		out[i] = ms2t(m)
	}
	return out
}

func ms2t(m int) time.Time { return t0.Add(time.Duration(m) * time.Millisecond) }

const sec = time.Second

func TestMaxIn(t *testing.T) {
	cases := []struct {
		name        string
		times       []time.Time
		span        time.Duration
		count       int
		first, last int // ms offsets of the run (ignored when count is 0)
	}{
		{"empty", nil, sec, 0, 0, 0},
		{"one arrival", at(5), sec, 1, 5, 5},
		{"exactly span apart: half-open, never together", at(0, 1000), sec, 1, 0, 0},
		{"one ns less than span apart: together", at(0, 1000), sec + time.Nanosecond, 2, 0, 1000},
		{"chain exactly span apart", at(0, 1000, 2000, 3000), sec, 1, 0, 0},
		{"same instant", at(7, 7, 7), sec, 3, 7, 7},
		{"unsorted input", at(2500, 100, 900, 1050, 300), sec, 4, 100, 1050},
		{"earliest of equal runs", at(0, 10, 2000, 2010), sec, 2, 0, 10},
		{"boundary burst", at(990, 995, 1000, 1005, 1989), sec, 5, 990, 1989},
		{"boundary burst, last exactly span after the first", at(990, 995, 1000, 1005, 1990), sec, 4, 990, 1005},
		{"boundary burst, window one ms short", at(990, 995, 1000, 1005, 1989), 999 * time.Millisecond, 4, 990, 1005},
		{"zero span holds nothing", at(1, 2, 3), 0, 0, 0, 0},
		{"negative span holds nothing", at(1, 2, 3), -sec, 0, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.times)
			w := MaxIn(tc.times, tc.span)
			if !slices.Equal(in, tc.times) {
				t.Fatalf("MaxIn modified its input")
			}
			if w.Count != tc.count || int64(w.Count) != w.Weight {
				t.Fatalf("MaxIn = %+v, want count %d", w, tc.count)
			}
			if tc.count == 0 {
				if w != (Window{}) {
					t.Fatalf("MaxIn = %+v, want the zero Window", w)
				}
				return
			}
			if !w.First.Equal(ms2t(tc.first)) || !w.Last.Equal(ms2t(tc.last)) {
				t.Fatalf("MaxIn = %+v, want first +%dms last +%dms", w, tc.first, tc.last)
			}
		})
	}
}

func TestMaxInAfter(t *testing.T) {
	times := at(0, 100, 200, 300, 1500, 1600, 2700)
	cases := []struct {
		name        string
		from        int
		count       int
		first, last int
	}{
		{"before everything", -1, 4, 0, 300},
		// The burst ends at 300: windows ending at 300 or later count, so
		// from=299 still sees the four.
		{"just before the burst's last arrival", 299, 4, 0, 300},
		// from=300: the burst's windows end at or before from; the busiest
		// one ending after it is (600, 1600].
		{"at the burst's last arrival", 300, 2, 1500, 1600},
		{"after the pair", 1600, 1, 2700, 2700},
		{"after everything", 2700, 0, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := MaxInAfter(times, sec, ms2t(tc.from))
			if w.Count != tc.count {
				t.Fatalf("MaxInAfter(+%dms) = %+v, want count %d", tc.from, w, tc.count)
			}
			if tc.count > 0 && (!w.First.Equal(ms2t(tc.first)) || !w.Last.Equal(ms2t(tc.last))) {
				t.Fatalf("MaxInAfter(+%dms) = %+v, want first +%dms last +%dms", tc.from, w, tc.first, tc.last)
			}
		})
	}
}

func TestMaxInWhere(t *testing.T) {
	times := at(0, 100, 200, 900, 1000, 1100, 2500)
	// Exclude the windows [t, t+1s) overlapping [950ms, 1050ms).
	exclFrom, exclTo := ms2t(950), ms2t(1050)
	keep := func(w Window) bool { return !(w.First.Before(exclTo) && w.First.Add(sec).After(exclFrom)) }
	w, n := MaxInWhere(times, sec, keep)
	// Only the windows starting at 1100 and 2500 are clear of it.
	if n != 2 || w.Count != 1 || !w.First.Equal(ms2t(1100)) {
		t.Fatalf("MaxInWhere = %+v, %d considered; want 1 from +1100ms, 2 considered", w, n)
	}
	w, n = MaxInWhere(times, sec, nil)
	if n != len(times) || w.Count != 4 || !w.First.Equal(ms2t(0)) || !w.Last.Equal(ms2t(900)) {
		t.Fatalf("MaxInWhere(nil) = %+v, %d considered; want 4 over 0..900ms, %d considered", w, n, len(times))
	}
	if w, n := MaxInWhere(nil, sec, nil); w != (Window{}) || n != 0 {
		t.Fatalf("MaxInWhere(empty) = %+v, %d", w, n)
	}
}

func TestMaxWeightIn(t *testing.T) {
	ev := func(ms int, w int64) Event { return Event{ms2t(ms), w} }
	cases := []struct {
		name   string
		evs    []Event
		span   time.Duration
		weight int64
		count  int
		first  int
	}{
		{"empty", nil, sec, 0, 0, 0},
		{"one", []Event{ev(3, 7)}, sec, 7, 1, 3},
		{"all zero weight", []Event{ev(3, 0), ev(4, 0)}, sec, 0, 0, 0},
		{"exactly span apart", []Event{ev(0, 5), ev(1000, 6)}, sec, 6, 1, 1000},
		{"heavy pair beats many light", []Event{ev(0, 1), ev(10, 1), ev(20, 1), ev(2000, 50), ev(2999, 50)}, sec, 100, 2, 2000},
		{"unsorted", []Event{ev(500, 2), ev(0, 3), ev(1200, 4)}, sec, 6, 2, 500},
		{"earliest of equal sums", []Event{ev(0, 5), ev(3000, 5)}, sec, 5, 1, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.evs)
			w := MaxWeightIn(tc.evs, tc.span)
			if !slices.Equal(in, tc.evs) {
				t.Fatalf("MaxWeightIn modified its input")
			}
			if w.Weight != tc.weight || w.Count != tc.count || (tc.count > 0 && !w.First.Equal(ms2t(tc.first))) {
				t.Fatalf("MaxWeightIn = %+v, want weight %d count %d from +%dms", w, tc.weight, tc.count, tc.first)
			}
		})
	}
}

func TestCountInAndWeightIn(t *testing.T) {
	times := at(0, 500, 1000, 1000, 1999, 2000)
	cases := []struct {
		name     string
		from, to int
		want     int
	}{
		{"half-open: from included, to excluded", 1000, 2000, 3},
		{"empty interval", 1000, 1000, 0},
		{"reversed interval", 2000, 1000, 0},
		{"everything", -1, 2001, 6},
		{"nothing after", 2001, 5000, 0},
	}
	var evs []Event
	for _, t := range times {
		evs = append(evs, Event{t, 10})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := CountIn(times, ms2t(tc.from), ms2t(tc.to)); got != tc.want {
				t.Errorf("CountIn = %d, want %d", got, tc.want)
			}
			if got := WeightIn(evs, ms2t(tc.from), ms2t(tc.to)); got != int64(10*tc.want) {
				t.Errorf("WeightIn = %d, want %d", got, 10*tc.want)
			}
		})
	}
	if CountIn(nil, t0, t0.Add(sec)) != 0 || WeightIn(nil, t0, t0.Add(sec)) != 0 {
		t.Errorf("empty input counted something")
	}
}

func TestShortestRun(t *testing.T) {
	times := at(900, 0, 300, 1000, 1200, 2500)
	cases := []struct {
		name string
		n    int
		keep func(first, last time.Time) bool
		want time.Duration
		ok   bool
	}{
		{"n=0", 0, nil, 0, false},
		{"n=1 spans nothing", 1, nil, 0, true},
		{"n=2", 2, nil, 100 * time.Millisecond, true},
		{"n=3", 3, nil, 300 * time.Millisecond, true},
		{"all", 6, nil, 2500 * time.Millisecond, true},
		{"more than there are", 7, nil, 0, false},
		{"keep only runs from 1s", 2, func(f, _ time.Time) bool { return !f.Before(ms2t(1000)) }, 200 * time.Millisecond, true},
		{"keep none", 2, func(time.Time, time.Time) bool { return false }, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := ShortestRun(times, tc.n, tc.keep)
			if d != tc.want || ok != tc.ok {
				t.Fatalf("ShortestRun(%d) = %v, %v; want %v, %v", tc.n, d, ok, tc.want, tc.ok)
			}
		})
	}
	if _, ok := ShortestRun(nil, 1, nil); ok {
		t.Fatalf("ShortestRun(empty) ok")
	}
}

// Brute force, straight from the definitions, on random inputs with
// coarse times so that ties and arrivals exactly span apart are common.

// bruteMax tries every half-open interval [s, s+span) with s at an arrival
// and every (e-span, e] with e at an arrival; both must agree. It returns
// the count and the earliest s achieving it.
func bruteMax(ts []time.Time, span time.Duration) (int, time.Time) {
	best, bestAt := 0, time.Time{}
	bestEnd := 0
	for _, s := range ts {
		n := 0
		for _, a := range ts {
			if !a.Before(s) && a.Before(s.Add(span)) {
				n++
			}
		}
		if n > best || (n == best && n > 0 && s.Before(bestAt)) {
			best, bestAt = n, s
		}
	}
	for _, e := range ts {
		n := 0
		for _, a := range ts {
			if a.After(e.Add(-span)) && !a.After(e) {
				n++
			}
		}
		bestEnd = max(bestEnd, n)
	}
	if span <= 0 {
		return 0, time.Time{}
	}
	if bestEnd != best {
		panic("brute force: start- and end-anchored maxima differ")
	}
	return best, bestAt
}

// bruteMaxAfter: intervals (e-span, e] ending at an arrival e after from.
func bruteMaxAfter(ts []time.Time, span time.Duration, from time.Time) (int, time.Time) {
	best, bestAt := 0, time.Time{}
	for _, e := range ts {
		if !e.After(from) {
			continue
		}
		n := 0
		for _, a := range ts {
			if a.After(e.Add(-span)) && !a.After(e) {
				n++
			}
		}
		if n > best || (n == best && n > 0 && e.Before(bestAt)) {
			best, bestAt = n, e
		}
	}
	return best, bestAt
}

func bruteWeight(evs []Event, span time.Duration) int64 {
	var best int64
	for _, s := range evs {
		var sum int64
		for _, e := range evs {
			if !e.At.Before(s.At) && e.At.Before(s.At.Add(span)) {
				sum += e.Weight
			}
		}
		best = max(best, sum)
	}
	return best
}

// bruteShortest: the least b-a over arrivals a <= b with at least n
// arrivals in [a, b].
func bruteShortest(ts []time.Time, n int) (time.Duration, bool) {
	var d time.Duration
	ok := false
	for _, a := range ts {
		for _, b := range ts {
			if b.Before(a) {
				continue
			}
			k := 0
			for _, x := range ts {
				if !x.Before(a) && !x.After(b) {
					k++
				}
			}
			if k >= n && (!ok || b.Sub(a) < d) {
				d, ok = b.Sub(a), true
			}
		}
	}
	return d, ok
}

func TestBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 2000; iter++ {
		n := rng.IntN(32)
		grain := time.Duration(1+rng.IntN(3)) * 100 * time.Millisecond
		spread := 1 + rng.IntN(30)
		ts := make([]time.Time, n)
		evs := make([]Event, n)
		for i := range ts {
			ts[i] = t0.Add(time.Duration(rng.IntN(spread)) * grain)
			evs[i] = Event{ts[i], int64(rng.IntN(5))}
		}
		span := time.Duration(rng.IntN(8)) * grain // often a multiple of the grain: exact-span pairs
		if rng.IntN(4) == 0 {
			span += time.Duration(rng.IntN(3)-1) * time.Nanosecond
		}

		w := MaxIn(ts, span)
		want, wantAt := bruteMax(ts, span)
		if w.Count != want || (want > 0 && !w.First.Equal(wantAt)) {
			t.Fatalf("iter %d: MaxIn(%v, span %v) = %+v; brute force %d from %v", iter, ts, span, w, want, wantAt)
		}
		if want > 0 {
			// The run really fits, and holds what both readings of the
			// interval hold.
			if !(w.Last.Sub(w.First) < span) ||
				CountIn(ts, w.First, w.First.Add(span)) != w.Count ||
				CountIn(ts, w.Last.Add(-span+1), w.Last.Add(1)) != w.Count {
				t.Fatalf("iter %d: MaxIn = %+v is not a window of %v over %v", iter, w, span, ts)
			}
		}

		from := t0.Add(time.Duration(rng.IntN(spread+1)-1) * grain)
		if rng.IntN(2) == 0 {
			from = from.Add(time.Duration(rng.IntN(3)-1) * time.Nanosecond)
		}
		if span > 0 {
			wa := MaxInAfter(ts, span, from)
			want, wantAt := bruteMaxAfter(ts, span, from)
			if wa.Count != want || (want > 0 && !wa.Last.Equal(wantAt)) {
				t.Fatalf("iter %d: MaxInAfter(%v, span %v, from %v) = %+v; brute force %d ending %v", iter, ts, span, from, wa, want, wantAt)
			}
		}

		if got, want := MaxWeightIn(evs, span).Weight, bruteWeight(evs, span); span > 0 && got != want {
			t.Fatalf("iter %d: MaxWeightIn(%v, span %v) = %d; brute force %d", iter, evs, span, got, want)
		}

		k := rng.IntN(6)
		d, ok := ShortestRun(ts, k, nil)
		var wd time.Duration
		wok := false
		if k >= 1 {
			wd, wok = bruteShortest(ts, k)
		}
		if d != wd || ok != wok {
			t.Fatalf("iter %d: ShortestRun(%v, %d) = %v, %v; brute force %v, %v", iter, ts, k, d, ok, wd, wok)
		}
		// Duality: a window of span holds k arrivals iff the shortest run
		// of k is shorter than span.
		if k >= 1 && span > 0 && (w.Count >= k) != (ok && d < span) {
			t.Fatalf("iter %d: MaxIn %d and ShortestRun(%d) %v disagree for span %v", iter, w.Count, k, d, span)
		}
	}
}

// TestLinearithmic guards against a quadratic scan: 200 000 arrivals in one
// window take tens of milliseconds sorted and scanned once, hours pairwise.
func TestLinearithmic(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ts := make([]time.Time, 200_000)
	for i := range ts {
		ts[i] = t0.Add(time.Duration(rng.Int64N(int64(time.Hour))))
	}
	start := time.Now()
	w := MaxIn(ts, time.Hour) // every arrival in one window: the worst case for a naive scan
	if w.Count != len(ts) {
		t.Fatalf("MaxIn over one window = %d, want %d", w.Count, len(ts))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("MaxIn over %d arrivals took %v", len(ts), d)
	}
}
