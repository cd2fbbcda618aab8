package reply

import (
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/limiter"
)

// TestAppendReset: the reset headers read like OpenAI's ("1s", "6m0s",
// "120ms"), which is time.Duration's String of the reset rounded up to the
// millisecond, for every millisecond up to two hours and a few beyond.
func TestAppendReset(t *testing.T) {
	check := func(d time.Duration) {
		t.Helper()
		want := "0s"
		if d > 0 {
			want = (d + time.Millisecond - 1).Truncate(time.Millisecond).String()
		}
		if got := string(appendReset(nil, d)); got != want {
			t.Fatalf("%v: %q, want %q", d, got, want)
		}
	}
	for _, d := range []time.Duration{-time.Second, 0, 1, time.Millisecond - 1, time.Millisecond + 1, 59*time.Second + 999*time.Millisecond + 1, 25 * time.Hour} {
		check(d)
	}
	step := time.Millisecond
	if testing.Short() {
		step = 61*time.Millisecond + time.Microsecond // a sample of every form, not every ms
	}
	for ms := time.Duration(0); ms <= 2*time.Hour; ms += step {
		check(ms)
	}
}

// TestRateHeadersDoNotAllocate: the x-ratelimit headers are written on
// every answer.
func TestRateHeadersDoNotAllocate(t *testing.T) {
	var h fasthttp.ResponseHeader
	d := limiter.Decision{LimitRequests: 600, RemainingRequests: 12, ResetRequests: 6500 * time.Millisecond,
		LimitTokens: 90000, RemainingTokens: 4000, ResetTokens: 61234 * time.Millisecond}
	SetRateHeaders(&h, &d)
	if allocs := testing.AllocsPerRun(100, func() { SetRateHeaders(&h, &d) }); allocs != 0 {
		t.Errorf("SetRateHeaders allocates %v times", allocs)
	}
	if got := string(h.Peek("x-ratelimit-reset-tokens")); got != "1m1.234s" {
		t.Errorf("reset-tokens %q", got)
	}
}
