package router_test

// The late settlement of a call whose client hung up, under attack (a
// reviewer's): sequences after which the tenant's window, its settled
// counter or the provider's budget held another number than the provider
// billed or ran. Each doc comment says what happened before the fix.

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
)

// hangUpRaw sends body to the node for key on a connection of its own,
// waits until arrived says the upstream has it, and closes the connection
// (an SDK's timeout).
func (e *env) hangUpRaw(key, path string, body []byte, arrived func() bool) {
	e.t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
	if err != nil {
		e.t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, key, len(body), body)
	if !poll(settleWait, arrived) {
		e.t.Fatal("the request never reached the upstream")
	}
	conn.Close()
}

// settledTokens is the tenant's ringgate_tokens_total{phase="settled"}.
func (e *env) settledTokens(tenant string) float64 {
	return metricValue(string(e.get("/metrics", "").body), "ringgate_tokens_total", "tenant", tenant, "phase", "settled")
}

// slowUpstream answers every request after latency with answer, counting
// arrivals.
func slowUpstream(t *testing.T, arrived *atomic.Int32, latency time.Duration, answer func(w http.ResponseWriter)) string {
	return serveBytes(t, func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		time.Sleep(latency)
		answer(w)
	})
}

// lateCompletion is what slowUpstream's answers report generating.
const latePrompt, lateCompletion = 20, 3000

func answerSSE(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	writeSSE(w)
}

func writeSSE(w http.ResponseWriter) {
	fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n")
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n",
		latePrompt, lateCompletion, latePrompt+lateCompletion)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// answerSSEPlain is answerSSE under text/plain, as a server that does not
// set the SSE content type sends it.
func answerSSEPlain(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain")
	writeSSE(w)
}

func answerJSON(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
		latePrompt, lateCompletion, latePrompt+lateCompletion)
}

// The provider answers whole, with its usage, in the other form than the
// one asked for: a JSON request answered with an SSE body (read whole), or
// a streamed request answered with a JSON body. Its client gone, the call
// stayed at its reservation: only a JSON answer to a JSON request was
// settled again. reply.Dropped and usage.Tokens.Late read both as forward
// and stream would. So too a stream under another Content-Type than text/event-stream, which
// was read as JSON and charged its prompt alone.
func TestHangupAnswerInOtherFormSettledLate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream bool
		answer func(http.ResponseWriter)
	}{
		{"JSON request, SSE answer", false, answerSSE},
		{"stream request, JSON answer", true, answerJSON},
		{"stream request, SSE answer as text/plain", true, answerSSEPlain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var arrived atomic.Int32
			base := slowUpstream(t, &arrived, 600*time.Millisecond, tc.answer)
			e := newEnv(t, envConfig{
				tenants: []config.Tenant{tenantCfg("form", 1000, 1_000_000, 10)},
				openAI:  func(u *config.Upstream) { u.BaseURL = base },
			})
			e.hangUpRaw(keyOf("form"), "/v1/chat/completions", chatBody(openAIModel, 0, tc.stream, false),
				func() bool { return arrived.Load() == 1 })
			var v tenantView
			if !poll(settleWait, func() bool {
				v, _ = e.tenant("form")
				return v.InFlight.Used == 0 && v.Tokens.Used == latePrompt+lateCompletion
			}) {
				t.Fatalf("tenant charged %d, the provider billed %d", v.Tokens.Used, latePrompt+lateCompletion)
			}
		})
	}
}

// The provider refuses the call (500, no usage): it bills nothing, and
// with its client there the call is charged 0. Its client gone, the
// answer was known to be a refusal but the reservation stood; it is
// settled as with its client there now.
func TestHangupRefusedAnswerSettledToZero(t *testing.T) {
	var arrived atomic.Int32
	base := slowUpstream(t, &arrived, 600*time.Millisecond, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"error":{"message":"boom","type":"server_error"}}`)
	})
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("refused", 1000, 1_000_000, 10)},
		openAI:  func(u *config.Upstream) { u.BaseURL = base },
	})
	e.hangUpRaw(keyOf("refused"), "/v1/chat/completions", chatBody(openAIModel, 0, false, false),
		func() bool { return arrived.Load() == 1 })
	reserved := e.waitTenant("refused", "in_flight 0", func(v tenantView) bool { return v.InFlight.Used == 0 })
	var v tenantView
	if !poll(settleWait, func() bool { v, _ = e.tenant("refused"); return v.Tokens.Used == 0 }) {
		t.Fatalf("a call the provider refused is charged %d (%d at the hang-up)", v.Tokens.Used, reserved.Tokens.Used)
	}
}

// A tenant in shadow mode whose request its limits refuse is served
// uncharged (its ticket never admitted). Its client hung up; the hang-up
// counted the reservation in ringgate_tokens_total{phase="settled"}, and
// the late settlement added the whole answer again (it read the first
// settlement from the ticket, which said 0): counted twice. The counter
// reads the call's own first settlement now: in all, the larger of the two.
func TestHangupShadowServedCountedOnce(t *testing.T) {
	var arrived atomic.Int32
	base := slowUpstream(t, &arrived, 600*time.Millisecond, answerJSON)
	shadow := tenantCfg("shadow", 1, 1_000_000, 10)
	shadow.Mode = config.ModeShadow
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{shadow},
		openAI:  func(u *config.Upstream) { u.BaseURL = base },
	})
	if r := e.post("/v1/chat/completions", keyOf("shadow"), chatBody(openAIModel, 0, false, false), nil); r.status != http.StatusOK {
		t.Fatalf("first request: %s", r)
	}
	before := e.settledTokens("shadow")
	// Over its rpm of 1: served all the same, uncharged.
	e.hangUpRaw(keyOf("shadow"), "/v1/chat/completions", chatBody(openAIModel, 0, false, false),
		func() bool { return arrived.Load() == 2 })
	var mid float64
	if !poll(settleWait, func() bool { mid = e.settledTokens("shadow"); return mid > before }) {
		t.Fatal("the hang-up settled nothing")
	}
	time.Sleep(time.Second) // the provider answers 600 ms after the request
	after := e.settledTokens("shadow")
	want := max(mid-before, latePrompt+lateCompletion)
	if got := after - before; got != want {
		t.Errorf("settled counter grew %v for the call (%v at the hang-up, %d billed), want %v", got, mid-before, latePrompt+lateCompletion, want)
	}
}

// The provider's concurrency budget ([[upstreams]] concurrency) counts the
// calls the provider runs. A JSON call whose client hangs up runs on at
// the provider until its answer, but its provider slot went at the
// hang-up: with a concurrency of 1, the next request was sent while the
// first still ran, and the provider, at its own limit of 1, refused it.
// The budgets keep the slot until the answer comes now (providerHeld).
func TestHangupKeepsProviderSlotWhileProviderRuns(t *testing.T) {
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("one", 1000, 1_000_000, 10)},
		fake: fakeupstream.Options{Latency: 800 * time.Millisecond, CompletionMin: 5, CompletionMax: 5,
			Limits: fakeupstream.ProviderLimits{Concurrency: 1}},
		openAI: func(u *config.Upstream) { u.Concurrency = 1 },
	})
	e.hangUpRaw(keyOf("one"), "/v1/chat/completions", chatBody(openAIModel, 0, false, false),
		func() bool { return len(e.fake.Records()) == 1 })
	e.waitTenant("one", "the tenant's slot freed", func(v tenantView) bool { return v.InFlight.Used == 0 })
	r := e.post("/v1/chat/completions", keyOf("one"), chatBody(openAIModel, 0, false, false), nil)
	t.Logf("the next request: %d", r.status)
	for _, rec := range e.waitRecords(len(e.fake.Records())) {
		if rec.Status == http.StatusTooManyRequests {
			t.Errorf("the provider refused a call for its concurrency: ringgate ran 2 at once for 1")
		}
	}
	if e.upstreamSlotsInFlight() != 0 && poll(settleWait, func() bool { return e.upstreamSlotsInFlight() == 0 }) == false {
		t.Errorf("provider slots in flight %d after both calls ended", e.upstreamSlotsInFlight())
	}
}
