package router_test

// Review: token accounting attacks. Each test is a sequence in which the
// tenant's window holds fewer tokens than the provider billed (under-charge).

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/reserve"
)

// serveBytes answers every request on a loopback server with fn.
func serveBytes(t *testing.T, fn http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: fn}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// An Anthropic stream that ends without message_delta (an error event
// mid-stream, as Anthropic sends on overload, then the stream closed
// cleanly) is settled to message_start's usage (output_tokens 1), not to
// the text it carried: the stream counts as "complete" because the
// transport did not fail, and the usage is "Reported".
func TestReviewAnthropicStreamWithoutMessageDeltaUndercharged(t *testing.T) {
	const words = 2000
	text := fakeupstream.GeneratedText(words)
	base := serveBytes(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-review\",\"usage\":{\"input_tokens\":20,\"output_tokens\":1}}}\n\n")
		fmt.Fprint(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
		for i := 0; i < len(text); i += 400 {
			piece, _ := json.Marshal(text[i:min(i+400, len(text))])
			fmt.Fprintf(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":%s}}\n\n", piece)
		}
		fmt.Fprint(w, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n")
		fl.Flush()
	})
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("anth", 1000, 1_000_000, 10)},
		openAI: func(u *config.Upstream) {
			u.Kind, u.BaseURL, u.Models = config.KindAnthropic, base, []string{"claude-review"}
		},
	})
	r := e.post("/v1/messages", keyOf("anth"), messagesBody("claude-review", 4000, true), nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), "overloaded_error") {
		t.Fatalf("answer: %s", r)
	}
	v := e.waitTenant("anth", "in_flight 0", func(v tenantView) bool { return v.InFlight.Used == 0 })
	if v.Tokens.Used < words {
		t.Fatalf("stream carried %d completion tokens, tenant charged %d tokens in all", words, v.Tokens.Used)
	}
}

// A client that hangs up while a JSON (non-streamed) call waits for the
// provider is settled at its reservation (prompt + min(max_tokens, the
// default/average completion)); the provider still generates the whole
// answer, and its usage, in the answer Do returns, is dropped.
func TestReviewClientHangupJSONSettlesAtReservationNotUsage(t *testing.T) {
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("gone", 1000, 1_000_000, 10)},
		fake:    fakeupstream.Options{Latency: 400 * time.Millisecond, CompletionMin: 3000, CompletionMax: 3000},
	})
	body := chatBody(openAIModel, 4000, false, false)
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		keyOf("gone"), len(body), body)
	// Let the request reach the provider, then hang up (an SDK timeout).
	if !poll(settleWait, func() bool { return len(e.fake.Records()) == 1 }) {
		t.Fatal("request never reached the provider")
	}
	conn.Close()
	recs := e.waitRecords(1)
	billed := int64(recs[0].PromptTokens + recs[0].CompletionTokens)
	v := e.waitTenant("gone", "in_flight 0", func(v tenantView) bool { return v.InFlight.Used == 0 })
	if v.Tokens.Used < billed {
		t.Fatalf("provider generated %d tokens (prompt %d + completion %d, status %d); tenant charged %d",
			billed, recs[0].PromptTokens, recs[0].CompletionTokens, recs[0].Status, v.Tokens.Used)
	}
}

// A provider that reports no usage (self-hosted, fake -no-usage): a
// successful call is charged c.res.Prompt, which for a prompt over 1 KiB is
// the size-times-ratio estimate, not the tokenizer's count (the cut-stream
// and hang-up paths use exactPrompt, the complete path does not). A tenant
// teaches a low ratio with one sparse prompt, then sends dense ones: each
// is charged ~0.2 tokens a byte while it is ~0.68.
func TestReviewNoUsageLargePromptChargedAtEstimate(t *testing.T) {
	const tpm = 20_000
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("dense", 1000, tpm, 10)},
		fake:    fakeupstream.Options{NoUsage: true, CompletionMin: 10, CompletionMax: 10},
	})
	chat := func(content string) []byte {
		b, _ := json.Marshal(map[string]any{"model": openAIModel, "max_tokens": 10,
			"messages": []msg{{Role: "user", Content: content}}})
		return b
	}
	if r := e.post("/v1/chat/completions", keyOf("dense"), chat(strings.Repeat("internationalization ", 100)), nil); r.status != 200 {
		t.Fatalf("sparse: %s", r)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	admitted := 0
	for i := 0; i < 3; i++ {
		b := make([]byte, 18000)
		for j := range b {
			b[j] = byte(rnd.Uint32())
		}
		r := e.post("/v1/chat/completions", keyOf("dense"), chat(base64.StdEncoding.EncodeToString(b)), nil)
		if r.status == 200 {
			admitted++
		}
	}
	recs := e.waitRecords(1 + admitted)
	billed := int64(0)
	for _, rec := range recs {
		billed += int64(rec.PromptTokens + rec.CompletionTokens)
	}
	v := e.waitTenant("dense", "in_flight 0", func(v tenantView) bool { return v.InFlight.Used == 0 })
	t.Logf("admitted %d dense calls; provider counted %d tokens, tenant charged %d, tpm %d", admitted, billed, v.Tokens.Used, tpm)
	if billed > tpm {
		t.Errorf("provider's window holds %d tokens for a tenant with tpm %d", billed, tpm)
	}
	if v.Tokens.Used < billed*9/10 {
		t.Errorf("tenant charged %d for %d tokens the provider counted", v.Tokens.Used, billed)
	}
}

// A non-streamed chat answer without usage whose completion is a tool
// call: the fallback counts choices.#.message.content only, so the tool
// call's arguments are charged nothing.
func TestReviewNoUsageToolCallJSONChargedNothing(t *testing.T) {
	tok, err := reserve.NewTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(map[string]string{"essay": fakeupstream.GeneratedText(3000)})
	answer, _ := json.Marshal(map[string]any{
		"id": "c1", "object": "chat.completion", "model": "gpt-review",
		"choices": []any{map[string]any{"index": 0, "finish_reason": "tool_calls", "message": map[string]any{
			"role": "assistant", "content": nil,
			"tool_calls": []any{map[string]any{"id": "call_1", "type": "function",
				"function": map[string]any{"name": "write", "arguments": string(args)}}}}}},
	})
	base := serveBytes(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	})
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("tool", 1000, 1_000_000, 10)},
		openAI: func(u *config.Upstream) {
			u.BaseURL, u.Models = base, []string{"gpt-review"}
		},
	})
	if r := e.post("/v1/chat/completions", keyOf("tool"), chatBody("gpt-review", 4000, false, false), nil); r.status != 200 {
		t.Fatalf("answer: %s", r)
	}
	want := int64(tok.Count("gpt-review", string(args)))
	v := e.waitTenant("tool", "in_flight 0", func(v tenantView) bool { return v.InFlight.Used == 0 })
	if v.Tokens.Used < want {
		t.Fatalf("tool call of %d tokens generated; tenant charged %d in all", want, v.Tokens.Used)
	}
}
