package snapshot

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ringgate/ringgate/limiter"
)

const now0 = int64(1_750_000_000_000_000_000) // a Unix ns in 2025

// typicalSnapshot is a busy tenant's snapshot: a one-minute window with
// requests and tokens in n of its 129 buckets, and a few slots held in a
// ten-minute slot window.
func typicalSnapshot(tenant string, n int, rng *rand.Rand) *Snapshot {
	window := func(length time.Duration, n int, lo, hi int64) limiter.WindowState {
		width := int64(length) / limiter.Buckets
		ws := limiter.WindowState{Width: width, Head: now0 / width}
		for i := ws.Head - limiter.Buckets; i <= ws.Head && len(ws.Buckets) < n; i++ {
			if rng.IntN(129) < n {
				ws.Buckets = append(ws.Buckets, limiter.Bucket{Index: i, Value: lo + rng.Int64N(hi-lo+1)})
			}
		}
		return ws
	}
	reqs := window(time.Minute, n, 1, 40)
	toks := reqs
	toks.Buckets = make([]limiter.Bucket, len(reqs.Buckets))
	for i, b := range reqs.Buckets {
		toks.Buckets[i] = limiter.Bucket{Index: b.Index, Value: b.Value * (200 + rng.Int64N(2000))}
	}
	return &Snapshot{
		Tenant:    tenant,
		Writer:    "gw-3",
		WrittenAt: now0 + rng.Int64N(int64(time.Second)),
		RingHash:  rng.Uint64(),
		State: limiter.State{
			Requests: reqs,
			Tokens:   toks,
			Slots:    window(10*time.Minute, 4, 1, 3),
		},
	}
}

// equal compares snapshots, a nil and an empty bucket list alike.
func equal(a, b *Snapshot) bool {
	if a.Tenant != b.Tenant || a.Writer != b.Writer || a.WrittenAt != b.WrittenAt ||
		a.RingHash != b.RingHash || a.Final != b.Final {
		return false
	}
	if len(a.State.Away) != len(b.State.Away) {
		return false
	}
	for i := range a.State.Away {
		if a.State.Away[i].Node != b.State.Away[i].Node || !equalWindow(a.State.Away[i].Slots, b.State.Away[i].Slots) {
			return false
		}
	}
	return equalWindow(a.State.Requests, b.State.Requests) &&
		equalWindow(a.State.Tokens, b.State.Tokens) &&
		equalWindow(a.State.Slots, b.State.Slots)
}

func equalWindow(a, b limiter.WindowState) bool {
	if a.Width != b.Width || a.Head != b.Head || len(a.Buckets) != len(b.Buckets) {
		return false
	}
	for i := range a.Buckets {
		if a.Buckets[i] != b.Buckets[i] {
			return false
		}
	}
	return true
}

func fullWindow(width, head int64, n int, value func(i int) int64) limiter.WindowState {
	ws := limiter.WindowState{Width: width, Head: head}
	for i := range n {
		ws.Buckets = append(ws.Buckets, limiter.Bucket{Index: head - int64(n-1-i), Value: value(i)})
	}
	return ws
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	width := int64(time.Minute) / limiter.Buckets
	cases := []struct {
		name string
		s    *Snapshot
	}{
		{"empty state", &Snapshot{Tenant: "acme"}},
		{"empty bucket lists", &Snapshot{Tenant: "acme", State: limiter.State{
			Requests: limiter.WindowState{Width: width, Head: 7, Buckets: []limiter.Bucket{}},
		}}},
		{"typical", typicalSnapshot("acme", 100, rng)},
		{"final", func() *Snapshot { s := typicalSnapshot("acme", 20, rng); s.Final = true; return s }()},
		{"full windows", &Snapshot{Tenant: "t", Writer: "w", WrittenAt: now0, RingHash: math.MaxUint64, State: limiter.State{
			Requests: fullWindow(width, now0/width, 129, func(i int) int64 { return int64(i + 1) }),
			Tokens:   fullWindow(width, now0/width, 129, func(i int) int64 { return int64(i) << 40 }),
			Slots:    fullWindow(width*10, now0/width/10, 129, func(i int) int64 { return 1 }),
		}}},
		{"indexes near int64 max", &Snapshot{Tenant: "t", State: limiter.State{
			Requests: fullWindow(1, math.MaxInt64, 129, func(i int) int64 { return MaxValue - int64(i) }),
		}}},
		{"indexes near int64 min", &Snapshot{Tenant: "t", State: limiter.State{
			Tokens: fullWindow(1, math.MinInt64+128, 129, func(i int) int64 { return int64(i) }),
		}}},
		{"negative indexes and gaps", &Snapshot{Tenant: "t", WrittenAt: -1, State: limiter.State{
			Tokens: limiter.WindowState{Width: 5, Head: 100, Buckets: []limiter.Bucket{{Index: -5, Value: 300}, {Index: 99, Value: 7}, {Index: 100, Value: 0}}},
		}}},
		{"buckets out of order and past head", &Snapshot{Tenant: "t", State: limiter.State{
			Slots: limiter.WindowState{Width: 1, Head: 0, Buckets: []limiter.Bucket{{Index: 10, Value: 1}, {Index: math.MinInt64, Value: 2}, {Index: math.MaxInt64, Value: 3}}},
		}}},
		{"longest names", &Snapshot{Tenant: strings.Repeat("t", MaxNameLen), Writer: strings.Repeat("w", MaxNameLen)}},
		{"most buckets", &Snapshot{Tenant: "t", State: limiter.State{
			Requests: fullWindow(1, 1<<40, MaxBuckets, func(i int) int64 { return 1 }),
		}}},
		{"unicode and braces", &Snapshot{Tenant: "ténant-{x}", Writer: "gw-ü"}},
		{"slots away on other nodes", &Snapshot{Tenant: "t", Writer: "gw-1", State: limiter.State{
			Slots: fullWindow(width, 9, 2, func(int) int64 { return 1 }),
			Away: []limiter.NodeSlots{
				{Node: "gw-2", Slots: fullWindow(width, 9, 3, func(int) int64 { return 2 })},
				{Node: "gw-3", Slots: limiter.WindowState{Width: width, Head: 9}},
			},
		}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.s.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			b := Encode(nil, tc.s)
			got, err := Decode(b)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !equal(&got, tc.s) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, *tc.s)
			}
			// Encoding is deterministic: the decoded value encodes alike.
			if b2 := Encode(nil, &got); !bytes.Equal(b, b2) {
				t.Fatalf("re-encoding differs")
			}
		})
	}
}

func TestEncodeAppends(t *testing.T) {
	s := typicalSnapshot("acme", 50, rand.New(rand.NewPCG(3, 4)))
	prefix := []byte("xyz")
	b := Encode(append([]byte(nil), prefix...), s)
	if !bytes.HasPrefix(b, prefix) {
		t.Fatal("Encode overwrote dst")
	}
	got, err := Decode(b[len(prefix):])
	if err != nil || !equal(&got, s) {
		t.Fatalf("Decode after prefix: %v", err)
	}
}

// TestLimiterState round-trips a state exported by a real limiter and
// imports it into a fresh tenant.
func TestLimiterState(t *testing.T) {
	limits := limiter.Limits{Requests: 1000, Tokens: 10_000_000, Concurrency: 100}
	a := limiter.NewTenant(limits, time.Minute, 10*time.Minute)
	rng := rand.New(rand.NewPCG(5, 6))
	now := now0
	for range 500 {
		now += rng.Int64N(int64(200 * time.Millisecond))
		tk, d := a.Admit(now, 100+rng.Int64N(1000))
		if d.Allowed && rng.IntN(50) > 0 {
			a.Finish(now, &tk, 50+rng.Int64N(2000))
		}
	}
	st := a.Export(now)
	if st.Empty() {
		t.Fatal("empty export")
	}
	in := &Snapshot{Tenant: "acme", Writer: "gw-1", WrittenAt: now, State: st}
	b := Encode(nil, in)
	out, err := Decode(b)
	if err != nil || !equal(&out, in) {
		t.Fatalf("round trip of an exported state: %v", err)
	}
	bt := limiter.NewTenant(limits, time.Minute, 10*time.Minute)
	bt.Import(now, out.State)
	if got, want := bt.Usage(now), a.Usage(now); got != want {
		t.Fatalf("usage after import %+v, want %+v", got, want)
	}
	t.Logf("exported state: %d/%d/%d buckets, %d bytes encoded",
		len(st.Requests.Buckets), len(st.Tokens.Buckets), len(st.Slots.Buckets), len(b))
}

func TestDecodeRejects(t *testing.T) {
	valid := Encode(nil, typicalSnapshot("acme", 100, rand.New(rand.NewPCG(7, 8))))
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), valid...)) }
	// header of a snapshot of tenant "t", writer "", zero times
	head := append([]byte("RGS\x01\x00\x01t\x00"), make([]byte, 16)...)
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"nil", nil, ErrFormat},
		{"short", []byte("RGS"), ErrFormat},
		{"bad magic", mutate(func(b []byte) []byte { b[0] = 'X'; return b }), ErrFormat},
		{"version 0", mutate(func(b []byte) []byte { b[3] = 0; return b }), ErrVersion},
		{"version 3", mutate(func(b []byte) []byte { b[3] = 3; return b }), ErrVersion},
		{"unknown flag", mutate(func(b []byte) []byte { b[4] |= 0x80; return b }), ErrFormat},
		{"trailing byte", append(append([]byte(nil), valid...), 0), ErrFormat},
		{"empty tenant", Encode(nil, &Snapshot{}), ErrFormat},
		{"tenant too long", Encode(nil, &Snapshot{Tenant: strings.Repeat("x", MaxNameLen+1)}), ErrFormat},
		{"writer too long", Encode(nil, &Snapshot{Tenant: "t", Writer: strings.Repeat("x", MaxNameLen+1)}), ErrFormat},
		{"name length overflows", []byte("RGS\x01\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), ErrFormat},
		{"too many buckets", Encode(nil, &Snapshot{Tenant: "t", State: limiter.State{
			Slots: fullWindow(1, 0, MaxBuckets+1, func(int) int64 { return 1 }),
		}}), ErrFormat},
		{"bucket count beyond input", append(append([]byte(nil), head...), 0, 0, 0x80, 0x20), ErrFormat},
		{"bad varint", append(append([]byte(nil), head...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), ErrFormat},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Decode(tc.b)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode error %v, want %v", err, tc.want)
			}
			if s.Tenant != "" || s.State.Requests.Buckets != nil {
				t.Fatalf("Decode returned a partial snapshot with its error")
			}
		})
	}
	// Every proper prefix of a valid encoding is truncated.
	for n := range len(valid) {
		if _, err := Decode(valid[:n]); !errors.Is(err, ErrFormat) {
			t.Fatalf("prefix of %d/%d bytes: %v", n, len(valid), err)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, s := range []*Snapshot{
		{},
		{Tenant: strings.Repeat("x", MaxNameLen+1)},
		{Tenant: "t", Writer: strings.Repeat("x", MaxNameLen+1)},
		{Tenant: "t", State: limiter.State{Tokens: fullWindow(1, 0, MaxBuckets+1, func(int) int64 { return 1 })}},
	} {
		if err := s.Validate(); !errors.Is(err, ErrFormat) {
			t.Errorf("Validate(%.40q...) = %v, want ErrFormat", s.Tenant, err)
		}
		if _, err := Decode(Encode(nil, s)); err == nil {
			t.Errorf("Decode accepts what Validate rejects (%.40q)", s.Tenant)
		}
	}
}

func TestSize(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{1, 10, 100, 129} {
		s := typicalSnapshot("tenant-00042", n, rng)
		size := len(Encode(nil, s))
		buckets := len(s.State.Requests.Buckets) + len(s.State.Tokens.Buckets) + len(s.State.Slots.Buckets)
		t.Logf("%3d request + %3d token + %d slot buckets: %4d bytes (%.1f per bucket with the header)",
			len(s.State.Requests.Buckets), len(s.State.Tokens.Buckets), len(s.State.Slots.Buckets),
			size, float64(size)/float64(buckets))
		// Header ≈ 70 bytes, a request bucket ≤ 2 bytes, a token bucket ≤ 5.
		if limit := 80 + 2*len(s.State.Requests.Buckets) + 5*len(s.State.Tokens.Buckets) + 3*len(s.State.Slots.Buckets); size > limit {
			t.Errorf("%d bytes, want ≤ %d", size, limit)
		}
	}
}

func FuzzDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(11, 12))
	f.Add(Encode(nil, typicalSnapshot("acme", 100, rng)))
	f.Add(Encode(nil, typicalSnapshot("b", 3, rng)))
	f.Add(Encode(nil, &Snapshot{Tenant: "t", Final: true}))
	f.Add(Encode(nil, &Snapshot{Tenant: "t", State: limiter.State{
		Requests: fullWindow(1, math.MaxInt64, 129, func(i int) int64 { return math.MinInt64 + int64(i) }),
	}}))
	f.Add([]byte{})
	f.Add([]byte("RGS"))
	f.Add([]byte("RGS\x02\x00"))
	f.Add([]byte("RGS\x01\x00\x01t\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("RGS\x01\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"))
	f.Add([]byte("garbage, not a snapshot"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrFormat) && !errors.Is(err, ErrVersion) {
				t.Fatalf("error %v wraps neither ErrFormat nor ErrVersion", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("decoded snapshot fails Validate: %v", err)
		}
		b2 := Encode(nil, &s)
		s2, err := Decode(b2)
		if err != nil {
			t.Fatalf("re-encoding does not decode: %v", err)
		}
		if !equal(&s, &s2) {
			t.Fatalf("re-encoding decodes to another value:\n%+v\n%+v", s, s2)
		}
		if len(b2) > len(b) {
			t.Fatalf("re-encoding is longer (%d) than the input (%d)", len(b2), len(b))
		}
	})
}

func BenchmarkEncode(b *testing.B) {
	s := typicalSnapshot("tenant-00042", 100, rand.New(rand.NewPCG(13, 14)))
	buf := Encode(nil, s)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = Encode(buf[:0], s)
	}
}

func BenchmarkDecode(b *testing.B) {
	buf := Encode(nil, typicalSnapshot("tenant-00042", 100, rand.New(rand.NewPCG(13, 14))))
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// A bucket value that could overflow a window's total is refused, by
// Validate before saving and by Decode when loading.
func TestBucketValueRange(t *testing.T) {
	for _, v := range []int64{-1, MaxValue + 1, math.MaxInt64} {
		s := &Snapshot{Tenant: "t", State: limiter.State{Tokens: limiter.WindowState{Width: 1, Head: 5, Buckets: []limiter.Bucket{{Index: 5, Value: v}}}}}
		if err := s.Validate(); !errors.Is(err, ErrFormat) {
			t.Errorf("Validate with value %d: %v", v, err)
		}
		if _, err := Decode(Encode(nil, s)); !errors.Is(err, ErrFormat) {
			t.Errorf("Decode with value %d: %v", v, err)
		}
	}
}

// A version 1 encoding (before slots away) still decodes, with no Away.
func TestDecodeVersion1(t *testing.T) {
	s := typicalSnapshot("acme", 10, rand.New(rand.NewPCG(3, 4)))
	b := Encode(nil, s)
	b[3] = 1
	b = b[:len(b)-1] // version 1 ends after the slots window: drop the empty away count
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !equal(&got, s) || got.State.Holder != s.Writer {
		t.Fatalf("version 1: got %+v", got)
	}
}
