package reqlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/logmeter"
	"github.com/ringgate/ringgate/upstream"
)

// lines decodes the JSON lines written to buf, and empties it.
func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		out = append(out, m)
	}
	buf.Reset()
	return out
}

// fakeNow is a test's clock: it moves only when the test says.
type fakeNow struct{ ns int64 }

func (f *fakeNow) now() int64 { return f.ns }

func newNode(access bool) (*Node, *bytes.Buffer, *fakeNow) {
	var buf bytes.Buffer
	clk := &fakeNow{ns: int64(time.Hour)}
	return New("node-1", slog.New(slog.NewJSONHandler(&buf, nil)), clk.now, access), &buf, clk
}

// refusal is a 429 answer named id.
func refusal(id string) *fasthttp.Response {
	var resp fasthttp.Response
	resp.SetStatusCode(429)
	resp.Header.Set(Header, id)
	resp.SetBody(upstream.ErrorBody("Rate limit reached.", "tokens", "rate_limit_exceeded", ""))
	return &resp
}

// A line says every field of its refusal and of its answer.
func TestRefusedLineFields(t *testing.T) {
	n, buf, clk := newNode(false)
	var m logmeter.Meter
	ln := OnDecision("acme", Team, "team/research",
		&limiter.Decision{Limited: limiter.Tokens, LimitTokens: 1000, RemainingTokens: 10, RetryAfter: 1500*time.Millisecond + 1})
	n.Refused(clk.now(), &m, &ln, refusal("req-1"))
	got := lines(t, buf)
	if len(got) != 1 {
		t.Fatalf("%d lines, want 1", len(got))
	}
	want := map[string]any{"msg": "refused", "level": "INFO", "tenant": "acme", "limit_level": "team", "by": "team/research", "dimension": "tokens",
		"limit": 1000.0, "used": 990.0, "retry_after_ms": 1501.0,
		"request_id": "req-1", "status": 429.0, "code": "rate_limit_exceeded", "not_logged": 0.0}
	for k, v := range want {
		if got[0][k] != v {
			t.Errorf("%s = %v, want %v", k, got[0][k], v)
		}
	}
}

// One tenant's flood writes a line a second, the next saying how many
// it stands for; the clock is the caller's.
func TestRefusedTenantBound(t *testing.T) {
	n, buf, clk := newNode(false)
	var m logmeter.Meter
	resp := refusal("r")
	for range 5 {
		n.Refused(clk.now(), &m, &Line{Tenant: "acme"}, resp)
		clk.ns += int64(100 * time.Millisecond)
	}
	if got := lines(t, buf); len(got) != 1 || got[0]["not_logged"] != 0.0 {
		t.Fatalf("first second: %v, want one line with not_logged 0", got)
	}
	clk.ns += int64(500 * time.Millisecond)
	n.Refused(clk.now(), &m, &Line{Tenant: "acme"}, resp)
	if got := lines(t, buf); len(got) != 1 || got[0]["not_logged"] != 4.0 {
		t.Fatalf("next second: %v, want one line with not_logged 4", got)
	}
}

// Many tenants refused in one second write NodeLines lines; a tenant the
// node's bound skipped says so in its next line.
func TestRefusedNodeBound(t *testing.T) {
	n, buf, clk := newNode(false)
	meters := make([]logmeter.Meter, NodeLines+10)
	resp := refusal("r")
	for i := range meters {
		n.Refused(clk.now(), &meters[i], &Line{Tenant: fmt.Sprint("t", i)}, resp)
	}
	if got := lines(t, buf); len(got) != NodeLines {
		t.Fatalf("%d lines in one second, want %d", len(got), NodeLines)
	}
	clk.ns += int64(time.Second)
	n.Refused(clk.now(), &meters[len(meters)-1], &Line{Tenant: "last"}, resp)
	if got := lines(t, buf); len(got) != 1 || got[0]["not_logged"] != 1.0 {
		t.Fatalf("next second: %v, want one line with not_logged 1", got)
	}
}

// A wall clock set back does not mute the lines until it catches up: a
// step back starts a new period, for a tenant and for the node.
func TestRefusedAfterTheClockStepsBack(t *testing.T) {
	n, buf, clk := newNode(false)
	clk.ns = int64(10 * time.Hour)
	meters := make([]logmeter.Meter, NodeLines)
	resp := refusal("r")
	for i := range meters {
		n.Refused(clk.now(), &meters[i], &Line{Tenant: fmt.Sprint("t", i)}, resp)
	}
	if got := lines(t, buf); len(got) != NodeLines {
		t.Fatalf("%d lines before the step, want %d", len(got), NodeLines)
	}
	clk.ns -= int64(time.Hour)
	n.Refused(clk.now(), &meters[0], &Line{Tenant: "t0"}, resp)
	if got := lines(t, buf); len(got) != 1 {
		t.Fatalf("%d lines after the clock stepped back an hour, want 1", len(got))
	}
}

// A refusal not written costs no allocation: a flood of them must not
// feed the collector.
func TestRefusedMutedAllocatesNothing(t *testing.T) {
	n, _, clk := newNode(false)
	var m logmeter.Meter
	resp := refusal("r")
	n.Refused(clk.now(), &m, &Line{Tenant: "acme"}, resp)
	ln := &Line{Tenant: "acme"}
	if a := testing.AllocsPerRun(100, func() { n.Refused(clk.now(), &m, ln, resp) }); a != 0 {
		t.Errorf("%v allocations a muted refusal, want 0", a)
	}
}
