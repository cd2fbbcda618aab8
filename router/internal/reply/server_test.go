package reply

import (
	"math"
	"testing"
	"time"
)

func TestBodyBudget(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		size, maxBody, rate int64
		grace               time.Duration
		want                time.Duration
	}{
		{0, 8 * mib, 4096, 5 * time.Second, 5 * time.Second},                         // no body: the grace
		{4096, 8 * mib, 4096, 5 * time.Second, 6 * time.Second},                      // 1 s at the rate
		{1000, 8 * mib, 4096, 0, 1000 * time.Second / 4096},                          // fractions of a second
		{-1, 8 * mib, 4096, 5 * time.Second, 5*time.Second + 2048*time.Second},       // chunked: max_body_bytes
		{-2, 8 * mib, 4096, 5 * time.Second, 5*time.Second + 2048*time.Second},       // no length at all
		{16 * mib, 8 * mib, 4096, 5 * time.Second, 5*time.Second + 2048*time.Second}, // refused with 413 anyway
		{230, 250, 100, 500 * time.Millisecond, 500*time.Millisecond + 2300*time.Millisecond},
		{math.MaxInt64, math.MaxInt64, 1, time.Second, maxBodyBudget}, // no overflow
		{100, 8 * mib, 0, 5 * time.Second, 0},                         // rate unset: keep the header deadline
	} {
		if got := BodyBudget(tc.size, tc.maxBody, tc.rate, tc.grace); got != tc.want {
			t.Errorf("BodyBudget(%d, %d, %d, %s) = %s, want %s", tc.size, tc.maxBody, tc.rate, tc.grace, got, tc.want)
		}
	}
}
