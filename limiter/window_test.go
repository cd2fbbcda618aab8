package limiter

import (
	"math/rand"
	"reflect"
	"testing"
	"time"
)

// The compact form (at most fewMax charged slots, then the whole ring) is
// the ring to every reader: a window that starts compact and one that holds
// the whole ring from the start agree, slot for slot, through charges,
// credits and debits on live and departed buckets, rolls of every length,
// imports and rebuckets, with few and many charges a window.
func TestCompactBucketsAreTheRing(t *testing.T) {
	const width = int64(time.Second) / Buckets
	cases := []struct {
		name    string
		gap     int64 // a step's time advance is up to gap buckets
		perStep int   // charges at most, per step
	}{
		{"sparse", 40, 1},
		{"a few a window", 8, 2},
		{"busy", 1, 3},
		{"long gaps", 300, 2},
	}
	for _, tc := range cases {
		for seed := int64(1); seed <= 20; seed++ {
			rng := rand.New(rand.NewSource(seed))
			compact := NewWindow(100, time.Second)
			full := NewWindow(100, time.Second)
			full.buckets = new([ring]int64) // the whole ring from the start
			now := int64(1_000_000) * width
			var charged []int64
			check := func(step int, what string) {
				t.Helper()
				if full.buckets == nil {
					// Dropped when empty, or rebuilt by a rebucket: the
					// reference takes the whole ring again.
					b := new([ring]int64)
					for i := range int64(ring) {
						b[i] = full.at(i)
					}
					full.few, full.buckets = nil, b
				}
				for i := int64(0); i < ring; i++ {
					if a, b := compact.at(i), full.at(i); a != b {
						t.Fatalf("%s seed %d step %d (%s): slot %d holds %d compact, %d in the ring", tc.name, seed, step, what, i, a, b)
					}
				}
				if compact.total != full.total || compact.head != full.head || compact.newest != full.newest {
					t.Fatalf("%s seed %d step %d (%s): total/head/newest %d/%d/%d compact, %d/%d/%d ring", tc.name, seed, step, what,
						compact.total, compact.head, compact.newest, full.total, full.head, full.newest)
				}
				if a, b := compact.export(), full.export(); !reflect.DeepEqual(a, b) {
					t.Fatalf("%s seed %d step %d (%s): export %+v compact, %+v ring", tc.name, seed, step, what, a, b)
				}
			}
			for step := range 400 {
				now += rng.Int63n(tc.gap*width + 1)
				compact.advance(now)
				full.advance(now)
				check(step, "advance")
				switch op := rng.Intn(10); {
				case op < 6:
					for range 1 + rng.Intn(tc.perStep) {
						n := 1 + rng.Int63n(5)
						charged = append(charged, compact.charge(n))
						full.charge(n)
					}
					check(step, "charge")
				case op < 9 && len(charged) > 0:
					b := charged[rng.Intn(len(charged))]
					d := rng.Int63n(7) - 4
					compact.adjust(b, d)
					full.adjust(b, d)
					check(step, "adjust")
				default:
					// An import: a bucket anywhere from a window ago to a
					// little ahead (a writer whose clock runs ahead).
					ws := WindowState{Width: width, Head: now / width,
						Buckets: []Bucket{{Index: now/width - Buckets + rng.Int63n(Buckets+4), Value: 1 + rng.Int63n(3)}}}
					compact.merge(ws)
					full.merge(ws)
					check(step, "merge")
				}
			}
			m := compact.remapTo(now, 2*time.Second)
			compact.rebucket(m)
			full.rebucket(full.remapTo(now, 2*time.Second))
			check(400, "rebucket")
		}
	}
}
