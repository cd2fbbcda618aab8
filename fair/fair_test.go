package fair

import (
	"math"
	"math/rand/v2"
	"testing"
)

const eps = 1e-6

func randWants(rng *rand.Rand, n int) []Want {
	ws := make([]Want, n)
	for i := range ws {
		ws[i] = Want{Band: rng.IntN(Bands), Weight: float64(1 + rng.IntN(10)), Amount: float64(rng.IntN(200))}
		if rng.IntN(5) == 0 {
			ws[i].Band = 0
		}
	}
	return ws
}

// The division's defining properties, on random wants: nothing over what
// is wanted or over the capacity; the capacity all used while it is
// wanted; within a band, a want that gets less per weight than another is
// met in full (max-min); band 1 gets what band 0 leaves, and at least the
// floor while it wants it.
func TestDivideIsMaxMinFair(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 20000 {
		ws := randWants(rng, 1+rng.IntN(12))
		capacity := float64(rng.IntN(1500))
		floor := []float64{0, 0.25, 0.5}[rng.IntN(3)]
		d := Divide(capacity, floor, ws)
		var sum, demand float64
		var bandGot, bandWant [Bands]float64
		for _, w := range ws {
			s := d.Share(w)
			if s < -eps || s > w.Amount+eps {
				t.Fatalf("#%d: share %v of want %+v", iter, s, w)
			}
			sum += s
			demand += w.Amount
			bandGot[w.Band] += s
			bandWant[w.Band] += w.Amount
		}
		if sum > capacity+eps {
			t.Fatalf("#%d: %v shared of %v", iter, sum, capacity)
		}
		if want := min(capacity, demand); sum < want-eps {
			t.Fatalf("#%d: %v shared, %v wanted of %v (%+v)", iter, sum, demand, capacity, ws)
		}
		if math.Abs(d.Spare-(capacity-sum)) > eps {
			t.Fatalf("#%d: spare %v, capacity %v, shared %v", iter, d.Spare, capacity, sum)
		}
		for _, a := range ws {
			for _, b := range ws {
				if a.Band != b.Band {
					continue
				}
				sa, sb := d.Share(a), d.Share(b)
				if sa/a.Weight < sb/b.Weight-eps && sa < a.Amount-eps {
					t.Fatalf("#%d: %+v gets %v, less per weight than %+v's %v, and is not met", iter, a, sa, b, sb)
				}
			}
		}
		floorCap := floor * capacity
		if bandGot[1] < min(bandWant[1], floorCap)-eps {
			t.Fatalf("#%d: batch gets %v, wants %v, floor %v", iter, bandGot[1], bandWant[1], floorCap)
		}
		if bandGot[0] < bandWant[0]-eps && bandGot[1] > floorCap+eps {
			t.Fatalf("#%d: interactive short (%v of %v) while batch gets %v over its floor %v", iter, bandGot[0], bandWant[0], bandGot[1], floorCap)
		}
	}
}

// The cases the issue names: equal weights share equally; weights 1:2:3,
// none met, share 1:2:3; a want below its share gets all of it.
func TestDivideExamples(t *testing.T) {
	cases := []struct {
		name     string
		capacity float64
		wants    []Want
		shares   []float64
	}{
		{"equal", 150, []Want{{0, 1, 100}, {0, 1, 100}, {0, 1, 100}}, []float64{50, 50, 50}},
		{"weighted", 150, []Want{{0, 1, 300}, {0, 2, 300}, {0, 3, 300}}, []float64{25, 50, 75}},
		{"small want", 150, []Want{{0, 1, 10}, {0, 1, 300}, {0, 1, 300}}, []float64{10, 70, 70}},
		{"batch after interactive", 100, []Want{{0, 1, 90}, {1, 1, 90}}, []float64{75, 25}},
		{"batch takes what is left", 100, []Want{{0, 1, 30}, {1, 1, 90}}, []float64{30, 70}},
		{"not wanted", 100, []Want{{0, 1, 30}, {0, 1, 20}}, []float64{30, 20}},
		{"invalid", 100, []Want{{0, 0, 30}, {0, 1, math.NaN()}, {0, 1, 200}}, []float64{0, 0, 100}},
	}
	for _, tc := range cases {
		d := Divide(tc.capacity, 0.25, tc.wants)
		for i, w := range tc.wants {
			if got := d.Share(w); math.Abs(got-tc.shares[i]) > eps {
				t.Errorf("%s: want %d gets %v, want %v", tc.name, i, got, tc.shares[i])
			}
		}
	}
	if d := Divide(100, 0.25, []Want{{0, 1, 30}, {0, 3, 20}}); d.Spare != 50 || d.SpareFor(1) != 12.5 {
		t.Errorf("spare %v, for weight 1 %v: want 50, 12.5", d.Spare, d.SpareFor(1))
	}
}

// Nodes that report their flows merged into groups get, summed, what the
// flows would get divided one by one: exactly with few flows, and within
// a small part of the capacity with thousands.
func TestMergedReportsDivideAsTheFlows(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	worst := 0.0
	for iter := range 300 {
		nodes := 1 + rng.IntN(5)
		perNode := []int{3, 10, 200, 2000}[rng.IntN(4)]
		flows := make([][]Want, nodes)
		var all, merged []Want
		for n := range flows {
			flows[n] = randWants(rng, perNode)
			all = append(all, flows[n]...)
			merged = append(merged, Merge(flows[n], 16)...)
		}
		capacity := float64(rng.IntN(100 * perNode * nodes))
		exact, approx := Divide(capacity, 0.25, all), Divide(capacity, 0.25, merged)
		for n := range flows {
			var e, a float64
			for _, w := range flows[n] {
				e += exact.Share(w)
			}
			for _, w := range Merge(flows[n], 16) {
				a += approx.Share(w)
			}
			dev := math.Abs(e-a) / max(capacity, 1)
			if perNode <= 16 && dev > eps {
				t.Fatalf("#%d: %d flows a node: node %d gets %v merged, %v exact", iter, perNode, n, a, e)
			}
			worst = max(worst, dev)
		}
	}
	t.Logf("largest difference a node's merged report makes: %.2f %% of the capacity", 100*worst)
	if worst > 0.05 {
		t.Errorf("merged reports move a node's share by %.2f %% of the capacity", 100*worst)
	}
}

func TestMergeKeepsTotals(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ws := randWants(rng, 5000)
	m := Merge(ws, 16)
	var n [Bands]int
	var w, a [Bands]float64
	for _, x := range ws {
		w[x.Band] += x.Weight
		a[x.Band] += x.Amount
	}
	for _, x := range m {
		n[x.Band]++
		w[x.Band] -= x.Weight
		a[x.Band] -= x.Amount
	}
	for b := range Bands {
		if n[b] > 16 || math.Abs(w[b]) > eps || math.Abs(a[b]) > eps {
			t.Errorf("band %d: %d groups, weight off by %v, amount off by %v", b, n[b], w[b], a[b])
		}
	}
}

// A flow of a tiny level and one of a huge one do not stretch the groups:
// neighbours are joined where they are closest. Split evenly on a log
// scale instead, flows of levels 0.7 and 2.5 (weights 100) fell in one
// group and, with the water at 1.5, got 300 where they were due 220.
func TestMergeKeepsFarLevelsApart(t *testing.T) {
	// Node A: 17 interactive flows. 15 of weight 1 wanting little,
	// spread between levels 1e-6 and 1e6, and the two that matter:
	// weight 100 at level 0.7, weight 100 at level 2.5.
	var a []Want
	a = append(a, Want{0, 1, 1e-6}, Want{0, 1, 1e6})
	for i := range 13 {
		a = append(a, Want{0, 1, 1e-6 * float64(i+2)})
	}
	a = append(a, Want{0, 100, 70}, Want{0, 100, 250})
	// Node B: one flow wanting a lot.
	b := []Want{{0, 200, 1e6}}
	capacity := 521.5 // water at 1.5
	share := func(d Division, ws []Want) (s float64) {
		for _, w := range ws {
			s += d.Share(w) + d.SpareFor(w.Weight)
		}
		return s
	}
	exact := Divide(capacity, 0.25, append(append([]Want{}, a...), b...))
	ma := Merge(a, 16)
	approx := Divide(capacity, 0.25, append(append([]Want{}, ma...), b...))
	ea, eb := share(exact, a), share(exact, b)
	aa, ab := share(approx, ma), share(approx, b)
	t.Logf("groups %d; node A exact %.1f merged %.1f; node B exact %.1f merged %.1f (capacity %.0f)", len(ma), ea, aa, eb, ab, capacity)
	if dev := (aa - ea) / capacity; math.Abs(dev) > 1e-9 {
		t.Errorf("node A's merged report moves its part by %.2f %% of the capacity", 100*dev)
	}
}

func BenchmarkDivide(b *testing.B) {
	rng := rand.New(rand.NewPCG(9, 10))
	var ws []Want
	for range 8 {
		ws = append(ws, Merge(randWants(rng, 1000), 16)...)
	}
	b.ResetTimer()
	for range b.N {
		Divide(50000, 0.25, ws)
	}
}
