package router

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/logmeter"
)

// A burst of shadow refusals writes one shadow_refusal line a second per
// limit, the next one saying how many were not logged.
func TestShadowLogRateLimited(t *testing.T) {
	var logs bytes.Buffer
	r, _ := testRouter(t, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	var m logmeter.Meter
	refuse := func() {
		var ctx fasthttp.RequestCtx
		r.shadowRefusal(&ctx, "team/x", &m, limiter.Requests, time.Second)
		if got := string(ctx.Response.Header.Peek("x-ringgate-shadow-refused")); got != "requests" {
			t.Fatalf("x-ringgate-shadow-refused: %q", got)
		}
	}
	for range 5 {
		refuse()
	}
	if n := strings.Count(logs.String(), `"msg":"shadow_refusal"`); n != 1 {
		t.Fatalf("%d lines for a burst of 5, want 1:\n%s", n, logs.String())
	}
	m.Last.Store(time.Now().Add(-shadowLogEvery).UnixNano()) // a second later
	refuse()
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], `"not_logged":4`) || !strings.Contains(lines[1], `"tenant":"team/x"`) {
		t.Fatalf("after a second: %q, want a second line with not_logged 4", lines)
	}
}
