package limiter

import (
	"testing"
	"time"
)

// The previous owner A's clock runs 10 ms ahead of the new owner B's (much
// less than a 468.75 ms bucket), at a moment when a bucket boundary falls
// between the two clocks: A's frozen state holds its call in bucket H+1
// while B's head is H. Found by a reviewer: Import (merge) moved the charge
// to H, the call then settled on A and its credit named H+1, where B had
// charged its own admission by then. The credit took B's own 1000 tokens,
// A's reservation stayed in H, one bucket early, and B alone admitted 3000
// tokens within one window (its own 1000, then 2000 59.99 s later; limit
// 2000). Now B's windows roll to H+1 at the Import (clock.go).
func TestClockAheadCreditHitsTheCallsCharge(t *testing.T) {
	const window = time.Minute
	l := Limits{Requests: 100, Tokens: 2000}
	w := int64(window) / Buckets
	const skew = int64(10 * time.Millisecond)
	H := t0/w + 10
	// A at A-time (H+1)·w + 5 ms, which is B-time (H+1)·w - 5 ms: bucket H
	// on B's clock.
	tA := (H+1)*w + int64(5*time.Millisecond)
	a := NewTenant(l, window, 10*time.Minute)
	tk, d := a.Admit(tA, 1000)
	if !d.Allowed {
		t.Fatal("A refused")
	}
	st := a.Freeze(tA, "B")
	st.Holder = "A"

	b := NewTenant(l, window, 10*time.Minute)
	b.Import(tA-skew, st.As("B"))
	if u := b.Usage(tA - skew); u.Tokens != 1000 {
		t.Fatalf("import: %+v", u)
	}
	// B's own admission in bucket H+1, 20 ms later on B's clock.
	own := (H+1)*w + int64(10*time.Millisecond)
	if _, d := b.Admit(own, 1000); !d.Allowed {
		t.Fatalf("B's own admission refused: %+v", d)
	}
	if _, d := b.Admit(own, 1); d.Allowed {
		t.Fatal("B admitted past its token limit")
	}
	// A's call fails upstream: settled at 0 there, reported to B.
	delta, handed := a.FinishOrHand(tA+int64(20*time.Millisecond), &tk, 0)
	if !handed {
		t.Fatal("not handed")
	}
	b.ApplyFrom(own+1, "A", delta)
	if u := b.Usage(own + 1); u.Tokens != 1000 {
		t.Fatalf("after A's credit B counts %d tokens, want its own 1000", u.Tokens)
	}

	// One bucket before B's own admission leaves its window (bucket H has
	// left, H+1 still counts): at most 1000 more may be admitted.
	at := (H + ring) * w
	if at >= own+int64(window) {
		t.Fatalf("test geometry: %v not inside B's own charge's window", time.Duration(at-own))
	}
	admitted := int64(0)
	for range 40 {
		if _, d := b.Admit(at, 100); d.Allowed {
			admitted += 100
		}
	}
	if total := 1000 + admitted; total > l.Tokens {
		t.Fatalf("B alone admitted %d tokens within %v (its own 1000, then %d %v later); limit %d",
			total, window, admitted, time.Duration(at-own), l.Tokens)
	}
}

// The same 10 ms skew on a slot bucket (4.6875 s for a 10 min slot TTL).
// Found by a reviewer: the handed-over call's slot was moved to B's head
// bucket and its release, naming the bucket ahead, was clamped to what
// that bucket held (nothing): a minute after A's only call ended B still
// counted 1 in flight and refused at concurrency 1, until slot_ttl.
func TestClockAheadReleaseFreesTheSlot(t *testing.T) {
	const window = time.Minute
	const ttl = 10 * time.Minute
	l := Limits{Concurrency: 1}
	ws := int64(ttl) / Buckets
	const skew = int64(10 * time.Millisecond)
	S := t0/ws + 10
	tA := (S+1)*ws + int64(5*time.Millisecond)
	a := NewTenant(l, window, ttl)
	tk, d := a.Admit(tA, 0)
	if !d.Allowed {
		t.Fatal("A refused")
	}
	st := a.Freeze(tA, "B")
	st.Holder = "A"
	b := NewTenant(l, window, ttl)
	b.Import(tA-skew, st.As("B"))
	if u := b.Usage(tA - skew); u.InFlight != 1 {
		t.Fatalf("A's call not counted on B: %+v", u)
	}
	delta, _ := a.FinishOrHand(tA+int64(time.Second), &tk, 0)
	b.ApplyFrom(tA-skew+int64(time.Second), "A", delta)
	later := tA + int64(time.Minute)
	u := b.Usage(later)
	_, dec := b.Admit(later, 0)
	if u.InFlight != 0 || !dec.Allowed {
		t.Fatalf("A's only call ended a minute ago, yet B counts %d in flight and refuses (%v, retry %v)",
			u.InFlight, dec.Limited, dec.RetryAfter)
	}
}

// A bucket far ahead of the head (an hour here: a writer with another
// bucket width, or a clock that far off) is not taken as the time: rolling
// to it would forget this node's recent charges, and put everything it
// charges for the next hour in one bucket that leaves only when its clock
// gets there. It is counted in the head bucket, and a window later the
// whole limit is back.
func TestBucketFarAheadIsNotTheTime(t *testing.T) {
	const window = time.Minute
	width := int64(window) / Buckets
	far := (t0+int64(time.Hour))/width + 3
	cases := []struct {
		name      string
		from      func(tn *Tenant, now int64)
		wantUsage int64 // requests counted right after
	}{
		{"a state", func(tn *Tenant, now int64) {
			tn.Replace(now, State{}, State{Requests: WindowState{Width: width, Head: far, Buckets: []Bucket{{Index: far, Value: 1}}}})
		}, 3},
		{"a delta's debit", func(tn *Tenant, now int64) {
			tn.ApplyFrom(now, "A", Delta{Bucket: far, Requests: 1})
		}, 3},
		{"a delta's credit", func(tn *Tenant, now int64) {
			tn.ApplyFrom(now, "A", Delta{Bucket: far, Requests: -1})
		}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tn := NewTenant(Limits{Requests: 2}, window, window)
			for range 2 {
				tn.Admit(t0, 0)
			}
			tc.from(tn, t0+1)
			if u := tn.Usage(t0 + 1); u.Requests != tc.wantUsage {
				t.Fatalf("%d requests counted, want %d", u.Requests, tc.wantUsage)
			}
			if d := tn.Check(t0+1, 0); d.Allowed {
				t.Fatal("the tenant's own charges were forgotten")
			}
			later := t0 + int64(window) + 2*width
			if d := tn.Check(later, 0); !d.Allowed {
				t.Fatalf("a window later the tenant still refuses (%v, retry %v)", d.Limited, d.RetryAfter)
			}
		})
	}
}
