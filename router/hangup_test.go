package router_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
)

// hangupMetrics are the node's counters the hang-up tests check.
type hangupMetrics struct {
	gone, settled, inflight, upstream2xx float64
}

func (e *env) hangupMetrics(tenant string) hangupMetrics {
	e.t.Helper()
	m := string(e.get("/metrics", "").body)
	return hangupMetrics{
		gone:        plainMetric(m, "ringgate_client_gone_total"),
		settled:     metricValue(m, "ringgate_tokens_total", "tenant", tenant, "phase", "settled"),
		inflight:    plainMetric(m, "ringgate_inflight_requests"),
		upstream2xx: metricValue(m, "ringgate_upstream_responses_total", "upstream", "openai", "class", "2xx"),
	}
}

// plainMetric reads a series without labels ("name value"); NaN if absent.
func plainMetric(exposition, name string) float64 {
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return math.NaN()
}

// A client that hangs up while the upstream has not sent its first byte
// gets its slot back at once, not when the upstream answers: the tenant's
// only slot admits another request while the first upstream call still
// runs, the hung-up call is settled at its reservation, and it is finished
// exactly once, also after the upstream's late answer (a JSON answer then
// settles its tokens again, on its usage: settleLate).
func TestHangupBeforeFirstByteFreesSlot(t *testing.T) {
	t.Parallel()
	// The upstream thinks for 3 s before its headers; the slot must be
	// back while it still does (checked on the fake's record, not a clock).
	const latency = 3 * time.Second
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envConfig{
				tenants: []config.Tenant{tenantCfg("acme", 1000, 1_000_000, 1)},
				fake:    fakeupstream.Options{Latency: latency, CompletionMin: 5, CompletionMax: 5},
			})
			body := chatBody(openAIModel, 50, stream, false)
			conn, err := net.DialTimeout("tcp", e.node.Addr(), clientTimeout)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, rawHead(e.node.Addr(), "/v1/chat/completions", keyOf("acme"), len(body))+string(body)); err != nil {
				t.Fatal(err)
			}
			// Admitted, and waiting on the upstream.
			held := e.waitTenant("acme", "the request admitted", func(v tenantView) bool { return v.InFlight.Used == 1 })
			reservation := held.Tokens.Used
			if !poll(settleWait, func() bool { return len(e.fake.Records()) == 1 }) {
				t.Fatal("the request never reached the upstream")
			}
			time.Sleep(150 * time.Millisecond) // a few checks find the client there

			hungUp := time.Now()
			conn.Close()
			var v tenantView
			freed := poll(settleWait, func() bool {
				v, err = e.tenant("acme")
				return err == nil && v.InFlight.Used == 0
			})
			freedAfter := time.Since(hungUp)
			rec := e.fake.Records()[0]
			if !freed {
				t.Fatalf("slot still taken %s after the client hung up: %+v", freedAfter.Round(time.Millisecond), v)
			}
			if !rec.Finished.IsZero() {
				t.Fatalf("the upstream answered (after %s) before the slot was seen free (%s after the hang-up): "+
					"the answer, not the hang-up, may have freed it", rec.Finished.Sub(rec.Received).Round(time.Millisecond), freedAfter.Round(time.Millisecond))
			}
			t.Logf("slot free %s after the hang-up (upstream answers %s after the request)", freedAfter.Round(time.Millisecond), latency)
			if v.Tokens.Used != reservation {
				t.Errorf("hung-up call settled at %d tokens, want its reservation %d", v.Tokens.Used, reservation)
			}

			// The only slot admits the next request while the first
			// upstream call still runs.
			r := e.post("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 50, false, false), nil)
			if r.status != http.StatusOK {
				t.Fatalf("request after the hang-up: want 200, got %s", r)
			}
			second, ok := num(jsonMap(t, r.body), "usage.total_tokens")
			if !ok {
				t.Fatalf("no usage in %s", r)
			}

			// The first call's upstream answer came (and was dropped); the
			// call was not finished a second time.
			var m hangupMetrics
			if !poll(settleWait, func() bool { m = e.hangupMetrics("acme"); return m.upstream2xx == 2 }) {
				t.Fatalf("upstream answers counted %v, want 2", m.upstream2xx)
			}
			// A stream cut unread stays at its reservation; a JSON answer,
			// read whole, is charged its usage (settleLate), here less
			// than reserved: the window gets the credit, the settled
			// counter (it only grows) keeps the reservation.
			first, settled := reservation, reservation
			if !stream {
				rec := e.fake.Records()[0]
				first = int64(rec.PromptTokens + rec.CompletionTokens)
			}
			var want int64
			if !poll(settleWait, func() bool {
				v, err = e.tenant("acme")
				want = first + second
				return err == nil && v.InFlight.Used == 0 && v.Tokens.Used == want
			}) {
				t.Errorf("tokens used %d, want %d (%d of the hung-up call + %d of the second)", v.Tokens.Used, want, first, second)
			}
			if m = e.hangupMetrics("acme"); m.settled != float64(settled+second) {
				t.Errorf("tokens settled %v, want %d: a call was settled twice or not at all", m.settled, settled+second)
			}
			if m.gone != 1 {
				t.Errorf("ringgate_client_gone_total %v, want 1", m.gone)
			}
			if m.inflight != 0 {
				t.Errorf("ringgate_inflight_requests %v after both calls, want 0", m.inflight)
			}
		})
	}
}

// A client that stays while the upstream thinks (the watch peeks at it
// several times) is answered as before and its call finished once: a JSON
// answer, a stream, and a keep-alive connection with the next request
// already sent (pipelined) while the first waits.
func TestHangupWatchClientStays(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of waiting: not in -short")
	}
	t.Parallel()
	const latency = 300 * time.Millisecond
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("acme", 1000, 1_000_000, 1)},
		fake:    fakeupstream.Options{Latency: latency, CompletionMin: 5, CompletionMax: 5},
	})
	var used int64 // tokens charged so far
	check := func(t *testing.T, add int64, calls float64) {
		t.Helper()
		used += add
		v := e.waitSettled("acme", used)
		m := e.hangupMetrics("acme")
		if m.settled != float64(v.Tokens.Used) {
			t.Errorf("tokens settled %v, want %d", m.settled, v.Tokens.Used)
		}
		if m.gone != 0 {
			t.Errorf("ringgate_client_gone_total %v, want 0", m.gone)
		}
		if m.upstream2xx != calls {
			t.Errorf("upstream answers counted %v, want %v", m.upstream2xx, calls)
		}
	}
	usage := func(t *testing.T, b []byte) int64 {
		t.Helper()
		n, ok := num(jsonMap(t, b), "usage.total_tokens")
		if !ok {
			t.Fatalf("no usage in %s", b)
		}
		return n
	}

	t.Run("json", func(t *testing.T) {
		r := e.post("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 50, false, false), nil)
		if r.status != http.StatusOK {
			t.Fatalf("want 200, got %s", r)
		}
		check(t, usage(t, r.body), 1)
	})

	t.Run("stream", func(t *testing.T) {
		r, err := e.sendStream("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 50, true, true))
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("want a complete 200 stream, got %v %v", r, err)
		}
		var total int64
		br := bufio.NewReader(bytes.NewReader(r.body))
		for _, ev := range readAllEvents(t, br) {
			if ev.data == "[DONE]" {
				continue
			}
			if n, ok := num(jsonMap(t, []byte(ev.data)), "usage.total_tokens"); ok {
				total = n
			}
		}
		if total == 0 {
			t.Fatal("no usage chunk in the stream")
		}
		check(t, total, 2)
	})

	t.Run("pipelined", func(t *testing.T) {
		body := chatBody(openAIModel, 50, false, false)
		req := rawHead(e.node.Addr(), "/v1/chat/completions", keyOf("acme"), len(body)) + string(body)
		conn, err := net.DialTimeout("tcp", e.node.Addr(), clientTimeout)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(clientTimeout))
		before := len(e.fake.Records())
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		// The next request is queued on the socket while the first waits
		// on the upstream: the watch sees its bytes, not a hang-up.
		if !poll(settleWait, func() bool { return len(e.fake.Records()) == before+1 }) {
			t.Fatal("the first request never reached the upstream")
		}
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		var add int64
		for i := range 2 {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("answer %d: %v", i+1, err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("answer %d: %d %s %v", i+1, resp.StatusCode, b, err)
			}
			add += usage(t, b)
		}
		check(t, add, 4)
	})
}

// A call whose upstream thinks for longer than the server's request read
// deadlines (node.header_timeout here) is not taken for a hang-up: the
// peek ignores the connection's read deadline (a Read would fail on it at
// once). Found as 499s for clients behind HAProxy whose owner was paused.
func TestHangupWatchIgnoresReadDeadline(t *testing.T) {
	t.Parallel()
	e := newEdgeEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("acme", 1000, 1_000_000, 1)},
		fake:    fakeupstream.Options{Latency: 900 * time.Millisecond, CompletionMin: 5, CompletionMax: 5},
	}, func(c *config.Config) {
		c.Node.HeaderTimeout = 200 * time.Millisecond
		c.Node.BodyGrace = 200 * time.Millisecond
	})
	r := e.post("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 50, false, false), nil)
	if r.status != 200 {
		t.Fatalf("an upstream slower than the read deadlines: %v", r)
	}
	if m := e.hangupMetrics("acme"); m.gone != 0 {
		t.Errorf("ringgate_client_gone_total %v, want 0", m.gone)
	}
}

// The provider's own 429 reaches the client once (not retried against the
// same upstream) and always with a Retry-After.
func TestProvider429PassesWithRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("acme", 1000, 1_000_000, 10)},
		fake:    fakeupstream.Options{Status: http.StatusTooManyRequests},
	})
	r := e.post("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 50, false, false), nil)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
		t.Fatalf("the provider's 429: %v (Retry-After %q)", r, r.header.Get("Retry-After"))
	}
	if n := len(e.fake.Records()); n != 1 {
		t.Errorf("the provider got %d requests, want 1 (no retry)", n)
	}
}
