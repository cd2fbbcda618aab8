package router_test

// Token accounting against requests crafted to get more from the provider
// than the tenant's tpm (a reviewer's, each failing before its fix).

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
)

// bigText is about n tokens of plain English-like text.
func bigText(n int) string {
	return strings.Repeat("lorem ipsum dolor sit amet ", n/5)
}

// A Responses request with "background": true is refused (400): OpenAI
// answers it at once with a queued response (no output, "usage": null),
// then generates the whole answer, up to max_output_tokens, and bills it.
// Served, it was settled as an answer without usage, its prompt alone: a
// tenant limited to 2 000 tokens a window had the provider generate
// 10 x 32 000 (a reviewer's).
func TestResponsesBackgroundRefused(t *testing.T) {
	base := serveBytes(t, func(w http.ResponseWriter, r *http.Request) {
		// As OpenAI answers a background request: queued, nothing yet.
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"resp_bg","object":"response","created_at":1,"status":"queued","background":true,`+
			`"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":32000,"model":"gpt-4o-mini",`+
			`"output":[],"parallel_tool_calls":true,"previous_response_id":null,"store":true,"usage":null,"user":null,"metadata":{}}`)
	})
	const tpm, maxOut, calls = 2000, 32000, 10
	e := newEnv(t, envConfig{
		tenants:       []config.Tenant{tenantCfg("bg", 1000, tpm, 10)},
		openAIBaseURL: base,
	})
	body := []byte(fmt.Sprintf(`{"model":%q,"background":true,"store":true,"max_output_tokens":%d,"input":"Write a 20000-word essay on token buckets."}`, openAIModel, maxOut))
	admitted := 0
	for range calls {
		r := e.post("/v1/responses", keyOf("bg"), body, nil)
		if r.status == http.StatusOK {
			admitted++
		} else if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "unsupported_parameter") {
			t.Errorf("a background response: %s, want 400 unsupported_parameter", r)
		}
	}
	v := e.waitTenant("bg", "in_flight 0", func(v tenantView) bool { return v.InFlight.Used == 0 })
	t.Logf("admitted %d background responses of up to %d output tokens each; tenant charged %d tokens (tpm %d)",
		admitted, maxOut, v.Tokens.Used, tpm)
	if int64(admitted)*maxOut > 10*tpm {
		t.Fatalf("the provider was let generate up to %d tokens in one window for a tpm of %d; the tenant was charged %d",
			admitted*maxOut, tpm, v.Tokens.Used)
	}
}

// A prompt in a field the parse did not count (or in the second copy of a
// nested key, which a last-wins parser reads) is reserved like the same
// prompt in a counted field: refused as too large here. It was reserved
// next to nothing and admitted, 120 times the tpm over a few windows with a
// provider reporting what it billed (a reviewer's). Each pair: the control
// (text in a counted field) and the evasion both get the 429.
func TestPromptInAnyFieldIsReserved(t *testing.T) {
	const tpm = 2000
	big := bigText(10000) // ~10 000 tokens: five times the tpm
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	cases := []struct {
		name, path, model, control, evasion string
	}{
		{
			// An assistant message's content parts may be refusals
			// (ChatCompletionContentPartRefusal): contentTexts reads
			// "text", not "refusal".
			name: "chat refusal content part", path: "/v1/chat/completions", model: openAIModel,
			control: `{"model":"` + openAIModel + `","max_tokens":10,"messages":[{"role":"assistant","content":[{"type":"text","text":` + q(big) + `}]},{"role":"user","content":"go on"}]}`,
			evasion: `{"model":"` + openAIModel + `","max_tokens":10,"messages":[{"role":"assistant","content":[{"type":"refusal","refusal":` + q(big) + `}]},{"role":"user","content":"go on"}]}`,
		},
		{
			// The deprecated assistant function_call (still accepted
			// by OpenAI): messageTexts reads tool_calls only.
			name: "chat assistant function_call", path: "/v1/chat/completions", model: openAIModel,
			control: `{"model":"` + openAIModel + `","max_tokens":10,"messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":` + q(big) + `}}]},{"role":"user","content":"go on"}]}`,
			evasion: `{"model":"` + openAIModel + `","max_tokens":10,"messages":[{"role":"assistant","content":null,"function_call":{"name":"f","arguments":` + q(big) + `}},{"role":"function","name":"f","content":"ok"},{"role":"user","content":"go on"}]}`,
		},
		{
			// A nested key written twice: the gateway reads the first
			// (get), a last-wins parser (Python's json, Go's) the second.
			name: "chat tool_calls duplicate arguments", path: "/v1/chat/completions", model: openAIModel,
			control: `{"model":"` + openAIModel + `","max_tokens":10,"messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":` + q(big) + `}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}]}`,
			evasion: `{"model":"` + openAIModel + `","max_tokens":10,"messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}","arguments":` + q(big) + `}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}]}`,
		},
		{
			name: "responses function_call_output duplicate output", path: "/v1/responses", model: openAIModel,
			control: `{"model":"` + openAIModel + `","max_output_tokens":16,"input":[{"type":"function_call_output","call_id":"c1","output":` + q(big) + `}]}`,
			evasion: `{"model":"` + openAIModel + `","max_output_tokens":16,"input":[{"type":"function_call_output","call_id":"c1","output":"ok","output":` + q(big) + `}]}`,
		},
		{
			// /v1/completions suffix (insert mode) is prompt text.
			name: "completions suffix", path: "/v1/completions", model: openAIModel,
			control: `{"model":"` + openAIModel + `","max_tokens":10,"prompt":` + q(big) + `}`,
			evasion: `{"model":"` + openAIModel + `","max_tokens":10,"prompt":"def f():","suffix":` + q(big) + `}`,
		},
		{
			// An Anthropic document's context is given to the model
			// (and billed); only its source is read.
			name: "anthropic document context", path: "/v1/messages", model: anthropicModel,
			control: `{"model":"` + anthropicModel + `","max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":` + q(big) + `}},{"type":"text","text":"summarize"}]}]}`,
			evasion: `{"model":"` + anthropicModel + `","max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"x"},"context":` + q(big) + `},{"type":"text","text":"summarize"}]}]}`,
		},
		{
			name: "anthropic document source duplicate data", path: "/v1/messages", model: anthropicModel,
			control: `{"model":"` + anthropicModel + `","max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":` + q(big) + `}},{"type":"text","text":"summarize"}]}]}`,
			evasion: `{"model":"` + anthropicModel + `","max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"x","data":` + q(big) + `}},{"type":"text","text":"summarize"}]}]}`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envConfig{tenants: []config.Tenant{tenantCfg("hid", 1000, tpm, 10)}})
			ctl := e.post(tc.path, keyOf("hid"), []byte(tc.control), nil)
			if ctl.status != http.StatusTooManyRequests {
				t.Fatalf("control (text in a counted field) answered %s, want 429", ctl)
			}
			ev := e.post(tc.path, keyOf("hid"), []byte(tc.evasion), nil)
			v := e.waitTenant("hid", "in_flight 0", func(v tenantView) bool { return v.InFlight.Used == 0 })
			if ev.status != http.StatusTooManyRequests {
				t.Errorf("the same ~10 000-token prompt in another field: %d (want 429 like the control); "+
					"%d bytes reached the provider for a tpm of %d; tenant charged %d",
					ev.status, len(tc.evasion), tpm, v.Tokens.Used)
			}
		})
	}
}

// A JSON answer over the gateway's 64 MiB cap (logprobs with many choices
// get there) is cut by the gateway after the provider generated and billed
// it: the client gets 502, and the tenant is charged the reservation, or
// max_tokens on every choice if more. It was charged nothing (a
// reviewer's).
func TestOversizeAnswerChargedItsReservation(t *testing.T) {
	const prompt, completion = 500, 60000
	pad := strings.Repeat("x", 65<<20)
	base := serveBytes(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
			pad, prompt, completion, prompt+completion)
	})
	e := newEnv(t, envConfig{
		tenants:       []config.Tenant{tenantCfg("big", 1000, 1_000_000, 10)},
		openAIBaseURL: base,
	})
	body := []byte(`{"model":"` + openAIModel + `","n":128,"logprobs":true,"top_logprobs":20,"max_tokens":470,"messages":[{"role":"user","content":"count to a million"}]}`)
	r, err := e.do(http.MethodPost, "/v1/chat/completions", keyOf("big"), body, nil)
	if err != nil {
		t.Fatal(err)
	}
	v := e.waitTenant("big", "in_flight 0", func(v tenantView) bool { return v.InFlight.Used == 0 })
	t.Logf("answer %d; tenant charged %d tokens; the provider billed %d", r.status, v.Tokens.Used, prompt+completion)
	if v.Tokens.Used < 470*128 {
		t.Fatalf("an answer the provider generated whole (billed %d) was charged %d tokens, below max_tokens on every choice", prompt+completion, v.Tokens.Used)
	}
}

// Calls cut short by their max_tokens do not teach the completion estimate
// of calls without one: 20 calls with max_tokens 1 taught an average of 1,
// and calls without max_tokens were then reserved 2 tokens each (a
// reviewer's). A call without max_tokens in flight holds its reservation
// in the tenant's window: at least default_completion (256) here.
func TestCappedCallsDoNotTeachTheUncappedEstimate(t *testing.T) {
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("est", 1000, 1_000_000, 10)},
		fake:    fakeupstream.Options{CompletionMin: 50, CompletionMax: 50, Latency: 150 * time.Millisecond},
	})
	for range 20 {
		if r := e.post("/v1/chat/completions", keyOf("est"), chatBody(openAIModel, 1, false, false), nil); r.status != http.StatusOK {
			t.Fatalf("a call with max_tokens 1: %s", r)
		}
	}
	before, err := e.tenant("est")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan reply, 1)
	go func() {
		done <- e.post("/v1/chat/completions", keyOf("est"), chatBody(openAIModel, 0, false, false), nil)
	}()
	v := e.waitTenant("est", "the uncapped call in flight", func(v tenantView) bool { return v.InFlight.Used == 1 })
	if reserved := v.Tokens.Used - before.Tokens.Used; reserved < 256 {
		t.Errorf("a call without max_tokens, after 20 cut at max_tokens 1, reserved %d tokens; want at least default_completion, 256", reserved)
	}
	if r := <-done; r.status != http.StatusOK {
		t.Errorf("the uncapped call: %s", r)
	}
}
