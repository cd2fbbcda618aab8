package limiter

import (
	"testing"
	"time"
)

// In the first window after time 0 (a fake clock that starts at 0, as the
// router's tests may use) the ring is not full yet: bucket indexes start at
// 0. Found by a reviewer: once a window held charges in more than fewMax
// buckets (the whole ring), a refusal (untilFits, for Retry-After) and
// Export walked the buckets from head-ring+1 < 0 and panicked with
// "index out of range [-122]" (7 admissions in buckets 0..6, then an 8th
// over a limit of 7; or an Export at bucket 6). A delta or state naming a
// bucket before 0 (nothing this package makes) is out of the window, not a
// negative ring slot.
func TestFirstWindowAfterTimeZero(t *testing.T) {
	const window = time.Minute
	width := int64(window) / Buckets
	cases := []struct {
		name  string
		limit int64
		check func(t *testing.T, tn *Tenant, now int64)
	}{
		{"a refusal's Retry-After", 7, func(t *testing.T, tn *Tenant, now int64) {
			_, d := tn.Admit(now, 0)
			if d.Allowed {
				t.Fatal("an 8th request admitted over a limit of 7")
			}
			// Bucket 0's charge stops counting when bucket ring starts.
			if want := time.Duration(ring*width - now); d.RetryAfter != want {
				t.Fatalf("Retry-After %v, want %v", d.RetryAfter, want)
			}
		}},
		{"Export", 100, func(t *testing.T, tn *Tenant, now int64) {
			st := tn.Export(now)
			if len(st.Requests.Buckets) != 7 || st.Requests.Buckets[0].Index != 0 {
				t.Fatalf("export %+v, want buckets 0..6", st.Requests)
			}
		}},
		{"a delta naming a bucket before 0", 100, func(t *testing.T, tn *Tenant, now int64) {
			tn.Apply(now, Delta{Bucket: -3, SlotBucket: -3, Requests: -1, Slots: -1})
			if u := tn.Usage(now); u.Requests != 7 || u.InFlight != 7 {
				t.Fatalf("a credit for a bucket before 0 changed the windows: %+v", u)
			}
		}},
		{"a state naming a bucket before 0", 100, func(t *testing.T, tn *Tenant, now int64) {
			tn.Import(now, State{Requests: WindowState{Width: width, Head: 6, Buckets: []Bucket{{Index: -3, Value: 1}, {Index: 2, Value: 1}}}})
			if u := tn.Usage(now); u.Requests != 1 {
				t.Fatalf("imported %d requests, want 1 (bucket 2's)", u.Requests)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tn := NewTenant(Limits{Requests: tc.limit, Concurrency: 100}, window, window)
			for i := range int64(7) { // 7 charged buckets: more than fewMax, the whole ring
				if _, d := tn.Admit(i*width, 0); !d.Allowed {
					t.Fatalf("admission %d refused", i)
				}
			}
			tc.check(t, tn, 6*width)
		})
	}
}
