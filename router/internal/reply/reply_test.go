package reply

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/upstream"
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

func TestFailSoonAndUpstreamFailed(t *testing.T) {
	var ctx fasthttp.RequestCtx
	FailSoon(&ctx, fasthttp.StatusServiceUnavailable, "server_error", "not_ready", "retry")
	if ctx.Response.StatusCode() != 503 || string(ctx.Response.Header.Peek("Retry-After")) != "1" ||
		!strings.Contains(string(ctx.Response.Body()), `"code":"not_ready"`) {
		t.Errorf("FailSoon: %d %q %s", ctx.Response.StatusCode(), ctx.Response.Header.Peek("Retry-After"), ctx.Response.Body())
	}
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("dial: %w", upstream.ErrTimeout), 504, "upstream_timeout"},
		{errors.New("connection refused"), 502, "upstream_unreachable"},
	} {
		var ctx fasthttp.RequestCtx
		timedOut := UpstreamFailed(&ctx, "up", tc.err)
		if timedOut != (tc.status == 504) || ctx.Response.StatusCode() != tc.status ||
			!strings.Contains(string(ctx.Response.Body()), `"code":"`+tc.code+`"`) {
			t.Errorf("UpstreamFailed(%v) = %v: %d %s", tc.err, timedOut, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}
