package router_test

// End-to-end tests on loopback: a net/http client, a real ringgate node
// (node.Start, fasthttp server, router) and a real fake provider
// (fakeupstream). Nothing is mocked. Assertions read what a client sees
// (status, body, headers, SSE events), what an operator sees (GET
// /tenants/{name}, /metrics) and what the provider saw (fake records).
//
// Timing is never asserted: whatever is asynchronous is polled with a
// deadline. The load tests (sliding-window audits) are parallel with each
// other; the test that checks that stream events are relayed as they are
// produced is not, so no load competes with it.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
)

// maxFraming bounds the tokens the gateway adds to its prompt estimate for
// message framing, above the bare text the provider counts.
const maxFraming = 32

// 1. A JSON chat completion passes through, and the rate-limit headers tell
// the truth.
func TestE2EChatJSONPassThrough(t *testing.T) {
	const rpm, tpm, maxTok = 100, 100_000, 16
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("acme", rpm, tpm, 10)},
		// Every answer is exactly maxTok tokens, so every reservation is
		// prompt + maxTok (the expected completion is capped by max_tokens):
		// the reservation is the same for each request.
		fake: fakeupstream.Options{CompletionMin: maxTok, CompletionMax: maxTok},
	})
	body := chatBody(openAIModel, maxTok, false, false)

	var settled, reservation int64
	for k := 1; k <= 3; k++ {
		r := e.post("/v1/chat/completions", keyOf("acme"), body, nil)
		if r.status != http.StatusOK {
			t.Fatalf("request %d: %s", k, r)
		}
		if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("Content-Type = %q", ct)
		}
		rec := e.waitRecords(k)[k-1]

		// What the provider saw: the gateway's key, the body unchanged.
		if rec.APIKey != openAIUpKey {
			t.Errorf("upstream saw api key %q, want the upstream's %q (never the tenant's)", rec.APIKey, openAIUpKey)
		}
		if !bytes.Equal(rec.Body, body) {
			t.Errorf("upstream body changed:\n got %s\nwant %s", rec.Body, body)
		}
		if rec.Path != "/v1/chat/completions" || rec.Model != openAIModel || rec.User != "e2e-user" || rec.Stream {
			t.Errorf("upstream record %+v", rec)
		}

		// What the client got: the provider's answer and usage.
		m := jsonMap(t, r.body)
		pt, ok1 := num(m, "usage.prompt_tokens")
		ct, ok2 := num(m, "usage.completion_tokens")
		if !ok1 || !ok2 || pt != int64(rec.PromptTokens) || ct != int64(rec.CompletionTokens) {
			t.Errorf("answer usage prompt=%d completion=%d, upstream reported %d/%d", pt, ct, rec.PromptTokens, rec.CompletionTokens)
		}
		if got := chatContent(m); got != fakeupstream.GeneratedText(maxTok) {
			t.Errorf("answer content %q, want the upstream's %q", got, fakeupstream.GeneratedText(maxTok))
		}

		// The headers: true limits, and remaining values that account for
		// every earlier request and for what earlier requests settled.
		rl := e.checkRateHeaders(r)
		if rl.limitReq != rpm || rl.limitTok != tpm {
			t.Errorf("limit headers requests=%d tokens=%d, want %d/%d", rl.limitReq, rl.limitTok, rpm, tpm)
		}
		if rl.remainingReq != int64(rpm-k) {
			t.Errorf("request %d: x-ratelimit-remaining-requests = %d, want %d", k, rl.remainingReq, rpm-k)
		}
		if k == 1 {
			reservation = tpm - rl.remainingTok
			min := int64(rec.PromptTokens + maxTok)
			if reservation < min || reservation > min+maxFraming {
				t.Errorf("first request reserved %d tokens (limit %d - remaining %d), want prompt %d + max_tokens %d (+ framing <= %d)",
					reservation, tpm, rl.remainingTok, rec.PromptTokens, maxTok, maxFraming)
			}
		} else if want := tpm - settled - reservation; rl.remainingTok != want {
			t.Errorf("request %d: x-ratelimit-remaining-tokens = %d, want %d = limit %d - settled %d - reservation %d",
				k, rl.remainingTok, want, tpm, settled, reservation)
		}
		if rl.resetReq <= 0 {
			t.Errorf("x-ratelimit-reset-requests = %s with a request in the window", rl.resetReq)
		}

		settled += int64(rec.PromptTokens + rec.CompletionTokens)
		v := e.waitSettled("acme", settled)
		if v.Requests.Used != int64(k) || v.Requests.Limit != rpm || v.Tokens.Limit != tpm {
			t.Errorf("tenant view %+v after %d requests", v, k)
		}
	}
}

func chatContent(m map[string]any) string {
	choices, _ := m["choices"].([]any)
	if len(choices) == 0 {
		return ""
	}
	c, _ := choices[0].(map[string]any)
	msg, _ := c["message"].(map[string]any)
	s, _ := msg["content"].(string)
	return s
}

// 2. SSE chat streams: relayed as produced, usage hidden from a client that
// did not ask for it but still settled, shown to one that did.
func TestE2EChatStream(t *testing.T) {
	const chunks = 40
	newStreamEnv := func(t *testing.T) *env {
		return newEnv(t, envConfig{
			tenants: []config.Tenant{tenantCfg("acme", 1000, 1_000_000, 10)},
			fake:    fakeupstream.Options{ChunkInterval: 20 * time.Millisecond, CompletionMin: chunks, CompletionMax: chunks},
		})
	}

	t.Run("client did not ask for usage", func(t *testing.T) {
		e := newStreamEnv(t)
		body := chatBody(openAIModel, 0, true, false)
		resp := e.openStream("/v1/chat/completions", keyOf("acme"), body, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
			t.Errorf("Content-Type = %q", ct)
		}
		e.checkRateHeaders(reply{status: resp.StatusCode, header: resp.Header})
		br := bufio.NewReader(resp.Body)

		// Read up to the first content event, checking after each event
		// that the provider is still producing the stream: the gateway
		// relays events as they come instead of buffering the answer.
		var evs []sseEvent
		for {
			ev, err := readEvent(br)
			if err != nil {
				t.Fatalf("reading event %d: %v", len(evs), err)
			}
			recs := e.fake.Records()
			if e.fake.InFlight() != 1 || len(recs) != 1 || !recs[0].Finished.IsZero() {
				t.Fatalf("event %d (%s) reached the client only after the upstream had finished its %d-chunk stream (in flight %d): the gateway buffers",
					len(evs), truncate(ev.data, 80), chunks, e.fake.InFlight())
			}
			evs = append(evs, ev)
			if chunkText(t, ev) != "" {
				break
			}
		}
		evs = append(evs, readAllEvents(t, br)...)

		if last := evs[len(evs)-1]; last.data != "[DONE]" {
			t.Errorf("last event %q, want [DONE]", last.data)
		}
		var text strings.Builder
		contentEvents := 0
		for _, ev := range evs {
			if strings.Contains(ev.data, `"usage"`) {
				t.Errorf("client that did not ask for usage got a usage field: %s", ev.data)
			}
			if ev.data == "[DONE]" {
				continue
			}
			if s := chunkText(t, ev); s != "" {
				contentEvents++
				text.WriteString(s)
			}
		}
		if contentEvents != chunks || text.String() != fakeupstream.GeneratedText(chunks) {
			t.Errorf("got %d content events with text %q, want %d events of %q", contentEvents, text.String(), chunks, fakeupstream.GeneratedText(chunks))
		}

		rec := e.waitRecords(1)[0]
		if !rec.Stream || !rec.IncludeUsage {
			t.Errorf("upstream saw stream=%v include_usage=%v, want both true (the gateway asks for usage)", rec.Stream, rec.IncludeUsage)
		}
		got, want := jsonMap(t, rec.Body), jsonMap(t, body)
		if so, _ := got["stream_options"].(map[string]any); !reflect.DeepEqual(so, map[string]any{"include_usage": true}) {
			t.Errorf("upstream stream_options = %v", got["stream_options"])
		}
		delete(got, "stream_options")
		if !reflect.DeepEqual(got, want) {
			t.Errorf("upstream body differs beyond stream_options:\n got %s\nwant %s", rec.Body, body)
		}
		e.waitSettled("acme", int64(rec.PromptTokens+rec.CompletionTokens))
	})

	t.Run("client asked for usage", func(t *testing.T) {
		e := newStreamEnv(t)
		body := chatBody(openAIModel, 0, true, true)
		resp := e.openStream("/v1/chat/completions", keyOf("acme"), body, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		evs := readAllEvents(t, bufio.NewReader(resp.Body))
		rec := e.waitRecords(1)[0]
		if !bytes.Equal(rec.Body, body) {
			t.Errorf("upstream body changed:\n got %s\nwant %s", rec.Body, body)
		}
		if len(evs) < 3 || evs[len(evs)-1].data != "[DONE]" {
			t.Fatalf("stream of %d events, want chunks, a usage chunk and [DONE]", len(evs))
		}
		usageChunk := jsonMap(t, []byte(evs[len(evs)-2].data))
		if choices, ok := usageChunk["choices"].([]any); !ok || len(choices) != 0 {
			t.Errorf("usage chunk choices = %v, want []", usageChunk["choices"])
		}
		pt, _ := num(usageChunk, "usage.prompt_tokens")
		ct, _ := num(usageChunk, "usage.completion_tokens")
		if pt != int64(rec.PromptTokens) || ct != int64(rec.CompletionTokens) || ct != chunks {
			t.Errorf("usage chunk %d/%d, upstream reported %d/%d", pt, ct, rec.PromptTokens, rec.CompletionTokens)
		}
		for _, ev := range evs[:len(evs)-2] {
			if !strings.Contains(ev.data, `"usage":null`) {
				t.Errorf("chunk without the \"usage\":null the provider sent: %s", ev.data)
			}
		}
		e.waitSettled("acme", int64(rec.PromptTokens+rec.CompletionTokens))
	})
}

// chunkText is the delta content of an OpenAI chat chunk.
func chunkText(t testing.TB, ev sseEvent) string {
	t.Helper()
	if ev.data == "[DONE]" {
		return ""
	}
	m := jsonMap(t, []byte(ev.data))
	choices, _ := m["choices"].([]any)
	if len(choices) == 0 {
		return ""
	}
	c, _ := choices[0].(map[string]any)
	d, _ := c["delta"].(map[string]any)
	s, _ := d["content"].(string)
	return s
}

// 3. Anthropic Messages, JSON and stream, with the key as x-api-key or as a
// bearer.
func TestE2EAnthropicMessages(t *testing.T) {
	cases := []struct {
		name        string
		stream      bool
		xAPIKey     bool
		version     string // client's anthropic-version; "" sends none
		wantVersion string
	}{
		{"json x-api-key", false, true, "", config.DefaultAnthropicVersion},
		{"json bearer", false, false, "", config.DefaultAnthropicVersion},
		{"stream x-api-key", true, true, "", config.DefaultAnthropicVersion},
		{"stream bearer", true, false, "", config.DefaultAnthropicVersion},
		{"json client anthropic-version", false, true, "2023-01-01", "2023-01-01"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envConfig{
				tenants: []config.Tenant{tenantCfg("acme", 1000, 1_000_000, 10)},
				fake:    fakeupstream.Options{CompletionMin: 30, CompletionMax: 60, Seed: 7},
			})
			key := keyOf("acme")
			if tc.xAPIKey {
				key = "x-api-key:" + key
			}
			var hdr map[string]string
			if tc.version != "" {
				hdr = map[string]string{"anthropic-version": tc.version}
			}
			body := messagesBody(anthropicModel, 500, tc.stream)
			r := e.post("/v1/messages", key, body, hdr)
			if r.status != http.StatusOK {
				t.Fatalf("%s", r)
			}
			e.checkRateHeaders(r)
			rec := e.waitRecords(1)[0]
			if rec.APIKey != anthropicUpKey {
				t.Errorf("upstream saw key %q, want the upstream's %q", rec.APIKey, anthropicUpKey)
			}
			if rec.AnthropicVersion != tc.wantVersion {
				t.Errorf("upstream saw anthropic-version %q, want %q", rec.AnthropicVersion, tc.wantVersion)
			}
			if !bytes.Equal(rec.Body, body) {
				t.Errorf("upstream body changed:\n got %s\nwant %s", rec.Body, body)
			}
			if rec.Path != "/v1/messages" || rec.Model != anthropicModel || rec.User != "e2e-user" {
				t.Errorf("upstream record %+v", rec)
			}
			n := rec.CompletionTokens
			wantText := fakeupstream.GeneratedText(n)

			if !tc.stream {
				m := jsonMap(t, r.body)
				in, _ := num(m, "usage.input_tokens")
				out, _ := num(m, "usage.output_tokens")
				if in != int64(rec.PromptTokens) || out != int64(n) {
					t.Errorf("answer usage %d/%d, upstream %d/%d", in, out, rec.PromptTokens, n)
				}
				content, _ := m["content"].([]any)
				if len(content) != 1 || content[0].(map[string]any)["text"] != wantText {
					t.Errorf("answer content %v, want text %q", m["content"], wantText)
				}
			} else {
				evs := readAllEvents(t, bufio.NewReader(bytes.NewReader(r.body)))
				var names []string
				var text strings.Builder
				var startIn, startOut, finalOut int64 = -1, -1, -1
				for _, ev := range evs {
					names = append(names, ev.name)
					m := jsonMap(t, []byte(ev.data))
					switch ev.name {
					case "message_start":
						startIn, _ = num(m, "message.usage.input_tokens")
						startOut, _ = num(m, "message.usage.output_tokens")
					case "content_block_delta":
						d, _ := m["delta"].(map[string]any)
						s, _ := d["text"].(string)
						text.WriteString(s)
					case "message_delta":
						finalOut, _ = num(m, "usage.output_tokens")
					}
				}
				if len(names) == 0 || names[0] != "message_start" || names[len(names)-1] != "message_stop" {
					t.Errorf("event sequence %v", names)
				}
				if text.String() != wantText {
					t.Errorf("streamed text %q, want %q", text.String(), wantText)
				}
				if startIn != int64(rec.PromptTokens) || finalOut != int64(n) {
					t.Errorf("stream usage input %d final output %d, upstream %d/%d", startIn, finalOut, rec.PromptTokens, n)
				}
				if startOut == finalOut {
					t.Fatalf("test needs message_start output_tokens (%d) to differ from the final count", startOut)
				}
			}
			// input + the final cumulative output_tokens: not the output of
			// message_start, not the sum of both.
			e.waitSettled("acme", int64(rec.PromptTokens+n))
		})
	}
}

// 4. Settlement: the window keeps actual usage, whether that is less than
// the reservation (credit), more (debit) or, without reported usage, what
// the gateway counted itself.
func TestE2ESettlement(t *testing.T) {
	const tpm, defaultCompletion = 1_000_000, 256
	const (
		credit = -1 // actual < reservation
		exact  = 0
		debit  = 1 // actual > reservation
	)
	cases := []struct {
		name       string
		path       string
		stream     bool
		maxTokens  int // 0: none (Messages always needs one)
		completion int
		noUsage    bool
		kind       int
		choices    int // n; 0: not sent
	}{
		{"credit chat json", "/v1/chat/completions", false, 2000, 100, false, credit, 0},
		{"credit chat stream", "/v1/chat/completions", true, 2000, 100, false, credit, 0},
		{"credit completions stream", "/v1/completions", true, 2000, 100, false, credit, 0},
		{"credit messages stream", "/v1/messages", true, 2000, 100, false, credit, 0},
		{"debit chat json", "/v1/chat/completions", false, 0, 600, false, debit, 0},
		{"debit chat stream", "/v1/chat/completions", true, 0, 600, false, debit, 0},
		{"debit messages json", "/v1/messages", false, 1000, 600, false, debit, 0},
		{"embeddings", "/v1/embeddings", false, 0, 0, false, exact, 0},
		{"no usage chat json", "/v1/chat/completions", false, 2000, 100, true, credit, 0},
		{"no usage chat stream", "/v1/chat/completions", true, 2000, 100, true, credit, 0},
		{"no usage completions json", "/v1/completions", false, 2000, 100, true, credit, 0},
		{"no usage messages json", "/v1/messages", false, 2000, 100, true, credit, 0},
		{"no usage messages stream", "/v1/messages", true, 2000, 100, true, credit, 0},
		{"no usage debit chat stream", "/v1/chat/completions", true, 0, 600, true, debit, 0},
		{"no usage embeddings", "/v1/embeddings", false, 0, 0, true, exact, 0},
		{"n=3 reserves three completions", "/v1/chat/completions", false, 50, 50, false, credit, 3},
		{"credit responses json", "/v1/responses", false, 2000, 100, false, credit, 0},
		{"credit responses stream", "/v1/responses", true, 2000, 100, false, credit, 0},
		{"debit responses stream", "/v1/responses", true, 0, 600, false, debit, 0},
		{"no usage responses json", "/v1/responses", false, 2000, 100, true, credit, 0},
		{"no usage responses stream", "/v1/responses", true, 2000, 100, true, credit, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envConfig{
				tenants:           []config.Tenant{tenantCfg("acme", 1000, tpm, 10)},
				defaultCompletion: defaultCompletion,
				fake:              fakeupstream.Options{CompletionMin: tc.completion, CompletionMax: tc.completion, NoUsage: tc.noUsage},
			})
			var body []byte
			generates := true
			switch tc.path {
			case "/v1/messages":
				body = messagesBody(anthropicModel, tc.maxTokens, tc.stream)
			case "/v1/completions":
				body = completionsBody(openAIModel, tc.maxTokens, tc.stream)
			case "/v1/responses":
				body = responsesBody(openAIModel, tc.maxTokens, tc.stream)
			case "/v1/embeddings":
				body, generates = embeddingsBody(openAIModel), false
			default:
				body = chatBody(openAIModel, tc.maxTokens, tc.stream, false)
			}
			if tc.choices > 0 {
				m := jsonMap(t, body)
				m["n"] = tc.choices
				body, _ = json.Marshal(m)
			}
			r := e.post(tc.path, keyOf("acme"), body, nil)
			if r.status != http.StatusOK {
				t.Fatalf("%s", r)
			}
			rec := e.waitRecords(1)[0]
			if generates && rec.CompletionTokens != tc.completion {
				t.Fatalf("upstream generated %d tokens, test expects %d", rec.CompletionTokens, tc.completion)
			}
			if tc.noUsage && bytes.Contains(r.body, []byte(`_tokens"`)) {
				t.Fatalf("upstream was told to report no usage, yet the answer has some: %s", truncate(string(r.body), 300))
			}

			// The reservation shows in the admission's remaining-tokens:
			// the gateway's prompt estimate plus the expected completion
			// (the default, capped by max_tokens, for a fresh tenant).
			rl := e.checkRateHeaders(r)
			reservation := tpm - rl.remainingTok
			expected := 0
			if generates {
				expected = defaultCompletion
				if tc.maxTokens > 0 {
					expected = min(expected, tc.maxTokens)
				}
				expected *= max(tc.choices, 1) // n completions are generated and billed
			}
			prompt := reservation - int64(expected)
			if prompt < int64(rec.PromptTokens) || prompt > int64(rec.PromptTokens)+maxFraming {
				t.Fatalf("reservation %d = prompt estimate %d + completion %d; the prompt estimate is not within %d of the upstream's count %d",
					reservation, prompt, expected, maxFraming, rec.PromptTokens)
			}

			want := int64(rec.PromptTokens + rec.CompletionTokens) // reported usage is the truth
			if tc.noUsage {
				// The gateway's own count: its prompt estimate plus the
				// completion text counted with the tokenizer (the fake's
				// text of n tokens counts exactly n).
				want = prompt + int64(tc.completion)
			}
			var kind int
			switch {
			case want < reservation:
				kind = credit
			case want > reservation:
				kind = debit
			}
			if kind != tc.kind {
				t.Fatalf("test case wrong: actual %d vs reservation %d", want, reservation)
			}
			v := e.waitSettled("acme", want)
			if v.Requests.Used != 1 {
				t.Errorf("requests used %d, want 1", v.Requests.Used)
			}
		})
	}
}

// hammerStats is what a load run saw.
type hammerStats struct {
	ok, limited atomic.Int64
	mu          sync.Mutex
	problems    []string
}

func (s *hammerStats) problem(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.problems) < 20 {
		s.problems = append(s.problems, fmt.Sprintf(format, args...))
	}
}

// hammer runs clients goroutines sending requests until target requests
// succeeded or the deadline passed. A 429 is checked (shape, and check429
// if given) and followed by a pause of its retry-after-ms, at most
// maxPause.
func hammer(clients, target int, deadline time.Time, maxPause time.Duration,
	send func(client int) (reply, error), check429 func(reply) string) *hammerStats {
	s := &hammerStats{}
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 99))
			for s.ok.Load() < int64(target) && time.Now().Before(deadline) {
				r, err := send(i)
				if err != nil {
					s.problem("%v", err)
					return
				}
				switch r.status {
				case http.StatusOK:
					s.ok.Add(1)
				case http.StatusTooManyRequests:
					s.limited.Add(1)
					var b struct {
						Error struct{ Code, Type, Message string } `json:"error"`
					}
					if err := json.Unmarshal(r.body, &b); err != nil || b.Error.Code != "rate_limit_exceeded" || b.Error.Message == "" {
						s.problem("429 body %s", r.body)
					}
					if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
						s.problem("429 Retry-After %q", r.header.Get("Retry-After"))
					}
					if check429 != nil {
						if p := check429(r); p != "" {
							s.problem("%s", p)
						}
					}
					pause := min(retryAfterMs(r.header), maxPause)
					pause += time.Duration(rng.IntN(2000)) * time.Microsecond
					time.Sleep(pause)
				default:
					s.problem("unexpected answer %s", r)
					return
				}
			}
		})
	}
	wg.Wait()
	return s
}

// jitterTolerance: the limiter enforces its window on the gateway's clock at
// admission; the audit reads the provider's arrival times, which trail
// admission by a loopback hop whose length varies (under -race on two
// shared cores, by tens of milliseconds). The sliding audit therefore uses
// intervals this much shorter than the window; the exactness tests do not
// run in parallel with others to keep that jitter small.
const jitterTolerance = 100 * time.Millisecond

// 5. Two-phase reservation: requests reserve max(expected) but settle at
// actual, so a tenant whose requests use far less than max_tokens still
// gets nearly its whole TPM, and never more. The same for the Responses
// API, settled from its JSON usage and its response.completed event.
func TestE2ETokenReservationEfficiency(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of load")
	}
	for _, tc := range []struct {
		path string
		body func(model string, maxTokens int, stream bool) []byte
	}{
		{"/v1/chat/completions", func(m string, mt int, s bool) []byte { return chatBody(m, mt, s, false) }},
		{"/v1/responses", responsesBody},
	} {
		t.Run(tc.path, func(t *testing.T) { tokenReservationEfficiency(t, tc.path, tc.body) })
	}
}

func tokenReservationEfficiency(t *testing.T, path string, mkBody func(model string, maxTokens int, stream bool) []byte) {
	const (
		window  = 2 * time.Second
		tpm     = 20_000
		maxTok  = 2000
		clients = 4
		windows = 3.5 // run length in windows of saturated demand
	)
	e := newEnv(t, envConfig{
		window:  window,
		tenants: []config.Tenant{tenantCfg("acme", 0, tpm, 0)},
		fake:    fakeupstream.Options{CompletionMin: 140, CompletionMax: 160, Seed: 1},
	})
	body := mkBody(openAIModel, maxTok, false)
	streamBody := mkBody(openAIModel, maxTok, true)
	// One request costs about prompt + 150 tokens.
	probe := e.post(path, keyOf("acme"), body, nil)
	if probe.status != http.StatusOK {
		t.Fatalf("probe: %s", probe)
	}
	rec0 := e.waitRecords(1)[0]
	perRequest := rec0.PromptTokens + 150
	target := int(windows * tpm / float64(perRequest))

	// Half the clients stream: their reservations are settled after the
	// last event rather than before the answer.
	s := hammer(clients, target, time.Now().Add(6*window+5*time.Second), 20*time.Millisecond,
		func(i int) (reply, error) {
			if i%2 == 1 {
				return e.sendStream(path, keyOf("acme"), streamBody)
			}
			return e.do(http.MethodPost, path, keyOf("acme"), body, nil)
		}, nil)
	for _, p := range s.problems {
		t.Error(p)
	}
	if s.ok.Load() < int64(target) {
		t.Fatalf("only %d of %d requests admitted before the deadline", s.ok.Load(), target)
	}
	recs := e.waitRecords(int(s.ok.Load()) + 1)

	var evs []weighted
	for _, r := range recs {
		if r.Status != http.StatusOK {
			t.Fatalf("upstream record %+v", r)
		}
		evs = append(evs, weighted{r.Received, int64(r.PromptTokens + r.CompletionTokens)})
	}
	auditSaturated(t, s, evs, window, tpm, 0.90, "tokens")
}

// 6a. RPM is exact under concurrent load.
func TestE2ERequestRateUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of load")
	}
	const (
		window  = 2 * time.Second
		rpm     = 50
		clients = 8
	)
	e := newEnv(t, envConfig{
		window:  window,
		tenants: []config.Tenant{tenantCfg("acme", rpm, 0, 0)},
		fake:    fakeupstream.Options{CompletionMin: 5, CompletionMax: 5},
	})
	body := chatBody(openAIModel, 5, false, false)
	streamBody := chatBody(openAIModel, 5, true, false)
	target := rpm*3 + rpm/2
	s := hammer(clients, target, time.Now().Add(6*window+5*time.Second), 20*time.Millisecond,
		func(i int) (reply, error) {
			if i%2 == 1 {
				return e.sendStream("/v1/chat/completions", keyOf("acme"), streamBody)
			}
			return e.do(http.MethodPost, "/v1/chat/completions", keyOf("acme"), body, nil)
		},
		func(r reply) string {
			if r.header.Get("x-ratelimit-remaining-requests") != "0" || r.header.Get("x-ratelimit-limit-requests") != strconv.Itoa(rpm) {
				return fmt.Sprintf("429 with x-ratelimit-remaining-requests %q limit %q",
					r.header.Get("x-ratelimit-remaining-requests"), r.header.Get("x-ratelimit-limit-requests"))
			}
			return ""
		})
	for _, p := range s.problems {
		t.Error(p)
	}
	if s.ok.Load() < int64(target) {
		t.Fatalf("only %d of %d requests admitted before the deadline", s.ok.Load(), target)
	}
	recs := e.waitRecords(int(s.ok.Load()))
	var evs []weighted
	for _, r := range recs {
		evs = append(evs, weighted{r.Received, 1})
	}
	auditSaturated(t, s, evs, window, rpm, 0.95, "requests")
}

// auditSaturated checks what reached the upstream under more demand than
// limit per window: never more than limit in any sliding window (shortened
// by jitterTolerance), at least minShare of it in every full window after
// the first arrival, and some requests refused.
func auditSaturated(t *testing.T, s *hammerStats, evs []weighted, window time.Duration, limit int64, minShare float64, unit string) {
	t.Helper()
	worst, at := maxSliding(evs, window-jitterTolerance)
	worstFull, _ := maxSliding(evs, window)
	full := fixedWindows(evs, evs[0].at, evs[len(evs)-1].at, window)
	t.Logf("%d admitted, %d refused; most %s in any %s: %d (in any %s: %d); per full window: %v",
		s.ok.Load(), s.limited.Load(), unit, window-jitterTolerance, worst, window, worstFull, full)
	if worst > limit {
		t.Errorf("%d %s reached the upstream within %s from %s: over the limit %d", worst, unit, window-jitterTolerance, at.Format(time.RFC3339Nano), limit)
	}
	if len(full) < 2 {
		t.Fatalf("only %d full windows of load", len(full))
	}
	for i, n := range full {
		if float64(n) < minShare*float64(limit) {
			t.Errorf("window %d carried %d %s, less than %.0f%% of the limit %d", i, n, unit, 100*minShare, limit)
		}
	}
	if s.limited.Load() == 0 {
		t.Errorf("no request was refused: the load did not saturate the %s limit", unit)
	}
}

// 6b. The concurrency limit holds at the provider.
func TestE2EConcurrencyLimit(t *testing.T) {
	t.Parallel()
	const limit, clients = 3, 10
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("acme", 0, 0, limit)},
		fake:    fakeupstream.Options{Latency: 100 * time.Millisecond, CompletionMin: 5, CompletionMax: 5},
	})
	body := chatBody(openAIModel, 5, false, false)
	var concurrencyRefusals atomic.Int64
	s := hammer(clients, 30, time.Now().Add(20*time.Second), 10*time.Millisecond,
		func(int) (reply, error) {
			return e.do(http.MethodPost, "/v1/chat/completions", keyOf("acme"), body, nil)
		},
		func(r reply) string {
			if strings.Contains(string(r.body), "concurren") {
				concurrencyRefusals.Add(1)
			}
			return ""
		})
	for _, p := range s.problems {
		t.Error(p)
	}
	recs := e.waitRecords(int(s.ok.Load()))
	t.Logf("%d admitted, %d refused; upstream max in flight %d", s.ok.Load(), s.limited.Load(), e.fake.MaxInFlight())
	if got := e.fake.MaxInFlight(); got > limit {
		t.Errorf("upstream saw %d requests of the tenant at once, over its concurrency %d", got, limit)
	}
	if e.fake.MaxInFlight() < 2 {
		t.Errorf("upstream never saw two requests at once: the test did not exercise concurrency")
	}
	if s.limited.Load() == 0 || concurrencyRefusals.Load() == 0 {
		t.Errorf("%d refusals, %d of them about concurrency: want some", s.limited.Load(), concurrencyRefusals.Load())
	}
	if len(recs) != int(s.ok.Load()) {
		t.Errorf("upstream saw %d requests, %d were admitted", len(recs), s.ok.Load())
	}
	e.waitTenant("acme", "in_flight 0", func(v tenantView) bool { return v.InFlight.Used == 0 })
}

// 7. The shape of a 429, and that waiting as told admits again.
func TestE2ERateLimitedAnswer(t *testing.T) {
	t.Parallel()
	const window = 500 * time.Millisecond
	e := newEnv(t, envConfig{
		window: window,
		tenants: []config.Tenant{
			tenantCfg("acme", 1, 1_000_000, 0),
			tenantCfg("small", 1000, 100, 0),
		},
		fake: fakeupstream.Options{CompletionMin: 5, CompletionMax: 5},
	})
	body := chatBody(openAIModel, 5, false, false)
	send := func() reply { return e.post("/v1/chat/completions", keyOf("acme"), body, nil) }
	check429 := func(r reply) (retryAfter, retryAfterPrecise time.Duration) {
		t.Helper()
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("want 429, got %s", r)
		}
		checkErrorShape(t, r, "rate_limit_exceeded")
		e.checkRateHeaders(r)
		ra, err := strconv.Atoi(r.header.Get("Retry-After"))
		if err != nil || ra < 1 {
			t.Errorf("Retry-After %q, want an integer number of seconds >= 1", r.header.Get("Retry-After"))
		}
		ms, err := strconv.Atoi(r.header.Get("retry-after-ms"))
		if err != nil || ms < 1 || time.Duration(ms)*time.Millisecond > window+window/64+time.Millisecond {
			t.Errorf("retry-after-ms %q, want 1..%d", r.header.Get("retry-after-ms"), (window+window/64).Milliseconds()+1)
		}
		if time.Duration(ra)*time.Second < time.Duration(ms)*time.Millisecond {
			t.Errorf("Retry-After %ds is earlier than retry-after-ms %dms", ra, ms)
		}
		return time.Duration(ra) * time.Second, time.Duration(ms) * time.Millisecond
	}

	if r := send(); r.status != http.StatusOK {
		t.Fatalf("first request: %s", r)
	}
	r := send()
	_, ms := check429(r)
	if got := r.header.Get("x-ratelimit-remaining-requests"); got != "0" {
		t.Errorf("x-ratelimit-remaining-requests %q on a refusal for requests, want 0", got)
	}
	if got := r.header.Get("x-ratelimit-limit-requests"); got != "1" {
		t.Errorf("x-ratelimit-limit-requests %q, want 1", got)
	}
	time.Sleep(ms)
	if r := send(); r.status != http.StatusOK {
		t.Fatalf("after waiting retry-after-ms: %s", r)
	}
	secs, _ := check429(send())
	time.Sleep(secs)
	if r := send(); r.status != http.StatusOK {
		t.Fatalf("after waiting Retry-After: %s", r)
	}
	if n := len(e.fake.Records()); n != 3 {
		t.Errorf("upstream saw %d requests, want the 3 admitted", n)
	}

	// A request larger than the whole tpm is refused with the same shape:
	// its prompt alone is over it. (A completion's reservation is capped
	// at the limit: max_tokens 2 000 with tpm 100 waits for a window with
	// room for the whole limit, and settles on what the provider says.)
	r = e.post("/v1/chat/completions", keyOf("small"), estChat(openAIModel, 5, strings.Repeat("many words ", 200)), nil)
	check429(r)
	if n := len(e.fake.Records()); n != 3 {
		t.Errorf("the refused request reached the upstream")
	}

	// The decisions are counted for operators.
	metrics := string(e.get("/metrics", "").body)
	for _, want := range []struct {
		tenant, result string
		n              int
	}{{"acme", "allowed", 3}, {"acme", "requests", 2}, {"small", "tokens", 1}} {
		if got := metricValue(metrics, "ringgate_decisions_total", "tenant", want.tenant, "result", want.result); got != float64(want.n) {
			t.Errorf("ringgate_decisions_total{tenant=%q,result=%q} = %v, want %d", want.tenant, want.result, got, want.n)
		}
	}
}

// 8. A client that hangs up mid-stream frees its slot at once.
func TestE2EClientGoneFreesSlot(t *testing.T) {
	t.Parallel()
	const tpm = 1_000_000
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("acme", 1000, tpm, 1)},
		// A 50-second stream: only the hang-up can end it within the test.
		fake: fakeupstream.Options{ChunkInterval: 50 * time.Millisecond, CompletionMin: 1000, CompletionMax: 1000},
	})
	body := chatBody(openAIModel, 2000, true, false)

	conn, err := net.DialTimeout("tcp", e.node.Addr(), clientTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(clientTimeout))
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		e.node.Addr(), keyOf("acme"), len(body), body)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	rl := e.checkRateHeaders(reply{status: resp.StatusCode, header: resp.Header})
	prompt := tpm - rl.remainingTok - 256 // reservation = prompt estimate + default completion
	sr := bufio.NewReader(resp.Body)
	for {
		ev, err := readEvent(sr)
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		if chunkText(t, ev) != "" {
			break
		}
	}

	// While the stream lives, the tenant's only slot is taken.
	if r := e.post("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 5, false, false), nil); r.status != http.StatusTooManyRequests {
		t.Fatalf("second request during the stream: want 429 (concurrency 1), got %s", r)
	}

	conn.Close()
	v := e.waitTenant("acme", "in_flight 0 after the client hung up", func(v tenantView) bool { return v.InFlight.Used == 0 })

	var rec fakeupstream.Record
	if !poll(settleWait, func() bool {
		recs := e.fake.Records()
		rec = recs[0]
		return len(recs) == 1 && rec.Aborted && !rec.Finished.IsZero()
	}) {
		t.Fatalf("upstream stream not aborted after the client hung up: %+v", rec)
	}
	// The cut stream is billed its prompt and what was generated before the
	// cut: at least the one content event the client read, at most what the
	// upstream wrote.
	if lo, hi := prompt+1, prompt+int64(rec.CompletionTokens); v.Tokens.Used < lo || v.Tokens.Used > hi {
		t.Errorf("cut stream billed %d tokens, want within [%d, %d] (prompt estimate %d, upstream wrote %d tokens)",
			v.Tokens.Used, lo, hi, prompt, rec.CompletionTokens)
	}

	if r := e.post("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 5, false, false), nil); r.status != http.StatusOK {
		t.Fatalf("request after the hang-up: %s", r)
	}
}

// 9. Bad input gets the right 4xx in OpenAI's shape: never a 5xx, never a
// hang, never a request upstream, never a charge.
func TestE2EBadInput(t *testing.T) {
	const maxBody = 4096
	e := newEnv(t, envConfig{
		maxBodyBytes: maxBody,
		tenants: []config.Tenant{
			tenantCfg("acme", 1000, 1_000_000, 10),
			tenantCfg("free", 0, 0, 0),
		},
		fake: fakeupstream.Options{CompletionMin: 1, CompletionMax: 8},
	})
	key := keyOf("acme")
	valid := string(chatBody(openAIModel, 16, false, false))
	big := `{"model":"` + openAIModel + `","messages":[{"role":"user","content":"` + strings.Repeat("x", 2*maxBody) + `"}]}`
	cases := []struct {
		name    string
		method  string
		path    string
		key     string
		body    string
		status  int
		code    string // "" = any
		tenant  bool   // the caller is an authenticated tenant: rate headers expected
		chunked bool   // send the body chunked, without Content-Length
	}{
		{name: "missing key", path: "/v1/chat/completions", body: valid, status: 401, code: "invalid_api_key"},
		{name: "unknown key", path: "/v1/chat/completions", key: "sk-nobody", body: valid, status: 401, code: "invalid_api_key"},
		{name: "unknown x-api-key", path: "/v1/messages", key: "x-api-key:sk-nobody", body: string(messagesBody(anthropicModel, 10, false)), status: 401},
		{name: "empty bearer", path: "/v1/chat/completions", key: " ", body: valid, status: 401},
		{name: "malformed JSON", path: "/v1/chat/completions", key: key, body: `{"model":"gpt-4o-mini",`, status: 400, tenant: true},
		{name: "empty body", path: "/v1/chat/completions", key: key, body: ``, status: 400, tenant: true},
		{name: "array body", path: "/v1/chat/completions", key: key, body: `[1,2,3]`, status: 400, tenant: true},
		{name: "string body", path: "/v1/chat/completions", key: key, body: `"hello"`, status: 400, tenant: true},
		{name: "null body", path: "/v1/chat/completions", key: key, body: `null`, status: 400, tenant: true},
		{name: "max_tokens negative", path: "/v1/chat/completions", key: key, body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":-5}`, status: 400, tenant: true},
		{name: "max_tokens string", path: "/v1/chat/completions", key: key, body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":"10"}`, status: 400, tenant: true},
		{name: "max_tokens fractional", path: "/v1/chat/completions", key: key, body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":1.5}`, status: 400, tenant: true},
		{name: "messages max_tokens negative", path: "/v1/messages", key: key, body: `{"model":"claude-3-5-haiku","messages":[{"role":"user","content":"hi"}],"max_tokens":-1}`, status: 400, tenant: true},
		{name: "missing model", path: "/v1/chat/completions", key: key, body: `{"messages":[{"role":"user","content":"hi"}]}`, status: 400, tenant: true},
		{name: "missing messages", path: "/v1/chat/completions", key: key, body: `{"model":"gpt-4o-mini"}`, status: 400, tenant: true},
		{name: "duplicate model", path: "/v1/chat/completions", key: key, body: `{"model":"gpt-4o-mini","model":"claude-3-5-haiku","messages":[{"role":"user","content":"hi"}]}`, status: 400, tenant: true},
		{name: "body too large", path: "/v1/chat/completions", key: key, body: big, status: 413},
		{name: "chunked body too large", path: "/v1/chat/completions", key: key, body: big, status: 413, chunked: true},
		{name: "GET on chat completions", method: http.MethodGet, path: "/v1/chat/completions", key: key, status: 405},
		{name: "messages with an OpenAI model", path: "/v1/messages", key: key, body: string(messagesBody(openAIModel, 10, false)), status: 400, tenant: true},
		{name: "chat with an Anthropic model", path: "/v1/chat/completions", key: key, body: string(chatBody(anthropicModel, 10, false, false)), status: 400, tenant: true},
		{name: "unknown API path", path: "/v1/nothing", key: key, body: valid, status: 404},
		{name: "unknown path", method: http.MethodGet, path: "/nothing", status: 404},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			var body []byte
			if method == http.MethodPost {
				body = []byte(tc.body)
			}
			var r reply
			var err error
			if tc.chunked {
				r, err = e.doChunked(tc.path, tc.key, body)
			} else {
				r, err = e.do(method, tc.path, tc.key, body, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.status != tc.status {
				t.Fatalf("got %s, want %d", r, tc.status)
			}
			checkErrorShape(t, r, tc.code)
			if tc.tenant {
				e.checkRateHeaders(r)
			}
		})
	}
	if n := len(e.fake.Records()); n != 0 {
		t.Errorf("%d refused requests reached the upstream", n)
	}
	v, err := e.tenant("acme")
	if err != nil {
		t.Fatal(err)
	}
	if v.Requests.Used != 0 || v.Tokens.Used != 0 || v.InFlight.Used != 0 {
		t.Errorf("refused requests were charged: %+v", v)
	}

	t.Run("garbage", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(2024, 7))
		paths := []string{"/v1/chat/completions", "/v1/messages", "/v1/completions", "/v1/embeddings"}
		seeds := [][]byte{
			chatBody(openAIModel, 8, false, false),
			chatBody(openAIModel, 8, true, true),
			messagesBody(anthropicModel, 8, true),
			[]byte(`{"model":"gpt-4o-mini","prompt":["a","b"],"max_tokens":4,"n":2}`),
			[]byte(`{"model":"gpt-4o-mini","input":[[1,2,3],[4]]}`),
		}
		statuses := map[int]int{}
		for i := range 400 {
			var b []byte
			switch i % 4 {
			case 0: // random bytes
				b = make([]byte, rng.IntN(600))
				for j := range b {
					b[j] = byte(rng.UintN(256))
				}
			case 1: // random printable JSON-ish characters
				const alphabet = `{}[]":,0123456789-.eE truefalsnl\abcmodelssagtkn`
				b = make([]byte, rng.IntN(300))
				for j := range b {
					b[j] = alphabet[rng.IntN(len(alphabet))]
				}
			default: // a valid request with a few bytes changed, cut or inserted
				b = bytes.Clone(seeds[rng.IntN(len(seeds))])
				for range 1 + rng.IntN(3) {
					p := rng.IntN(len(b))
					switch rng.IntN(3) {
					case 0:
						b[p] = byte(rng.UintN(256))
					case 1:
						b = b[:p]
					default:
						b = append(b[:p], append([]byte{byte(rng.UintN(128))}, b[p:]...)...)
					}
					if len(b) == 0 {
						break
					}
				}
			}
			path := paths[rng.IntN(len(paths))]
			r, err := e.do(http.MethodPost, path, keyOf("free"), b, nil)
			if err != nil {
				t.Fatalf("body %q to %s: %v", b, path, err)
			}
			statuses[r.status]++
			if r.status >= 500 {
				t.Errorf("body %q to %s: %s", b, path, r)
			}
		}
		t.Logf("statuses: %v", statuses)
	})
}

// 10. Upstream failures: 502, 504, and a provider's 5xx passed through; none
// of them charges tokens.
func TestE2EUpstreamFailures(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		ec       envConfig
		stream   bool
		status   int
		code     string
		upstream bool // the error body is the upstream's, passed through
	}{
		{name: "upstream down", ec: envConfig{openAIBaseURL: "http://" + closedPort(t)}, status: 502},
		{name: "upstream slower than its timeout", ec: envConfig{upstreamTimeout: 200 * time.Millisecond,
			fake: fakeupstream.Options{Latency: 3 * time.Second}}, status: 504},
		{name: "stream slower than its timeout", ec: envConfig{upstreamTimeout: 200 * time.Millisecond,
			fake: fakeupstream.Options{Latency: 3 * time.Second}}, stream: true, status: 504},
		{name: "upstream 500", ec: envConfig{fake: fakeupstream.Options{Status: 500}}, status: 500, upstream: true},
		{name: "upstream 500 on a stream", ec: envConfig{fake: fakeupstream.Options{Status: 500}}, stream: true, status: 500, upstream: true},
		{name: "upstream 503", ec: envConfig{fake: fakeupstream.Options{Status: 503}}, status: 503, upstream: true},
		{name: "upstream 429", ec: envConfig{fake: fakeupstream.Options{Status: 429}}, status: 429, upstream: true},
		{name: "upstream 400", ec: envConfig{fake: fakeupstream.Options{Status: 400}}, stream: true, status: 400, upstream: true},
		{name: "upstream rejects the gateway's key", ec: envConfig{fake: fakeupstream.Options{Status: 401}}, status: 502},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ec := tc.ec
			ec.tenants = []config.Tenant{tenantCfg("acme", 1000, 1_000_000, 10)}
			e := newEnv(t, ec)
			r := e.post("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 100, tc.stream, false), nil)
			if r.status != tc.status {
				t.Fatalf("got %s, want %d", r, tc.status)
			}
			em := checkErrorShape(t, r, tc.code)
			if tc.upstream && !strings.Contains(fmt.Sprint(em["message"]), "fakeupstream") {
				t.Errorf("error %v is not the upstream's, passed through", em)
			}
			e.checkRateHeaders(r)
			v := e.waitTenant("acme", "the failed call settled at 0 tokens", func(v tenantView) bool {
				return v.InFlight.Used == 0 && v.Tokens.Used == 0
			})
			if v.Requests.Used != 1 {
				t.Errorf("requests used %d, want 1", v.Requests.Used)
			}
		})
	}
}

// 11. Admin endpoints.
func TestE2EAdmin(t *testing.T) {
	t.Run("loopback, no token", func(t *testing.T) {
		e := newEnv(t, envConfig{tenants: []config.Tenant{tenantCfg("acme", 10, 1000, 2)}})
		if r := e.post("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 5, false, false), nil); r.status != 200 {
			t.Fatalf("%s", r)
		}
		for _, p := range []string{"/healthz", "/readyz", "/cluster", "/metrics", "/tenants/acme"} {
			if r := e.get(p, ""); r.status != 200 {
				t.Errorf("GET %s: %s", p, r)
			}
		}
		r := e.get("/tenants/unknown", "")
		if r.status != 404 {
			t.Errorf("GET /tenants/unknown: %s", r)
		} else {
			checkErrorShape(t, r, "")
		}
		m := e.get("/metrics", "")
		if !strings.Contains(string(m.body), "ringgate_decisions_total") {
			t.Errorf("/metrics lacks ringgate_decisions_total:\n%s", truncate(string(m.body), 2000))
		}
		if !strings.Contains(string(m.body), `tenant="acme"`) {
			t.Errorf("/metrics has no series for tenant acme")
		}
		v, err := e.tenant("acme")
		if err != nil {
			t.Fatal(err)
		}
		if v.Name != "acme" || v.Owner != e.cfg.Node.Name || v.Requests != (dim{1, 10}) || v.Tokens.Limit != 1000 ||
			v.InFlight != (dim{0, 2}) || v.Tokens.Used <= 0 {
			t.Errorf("tenant view %+v", v)
		}
		var cv struct {
			Self    string `json:"self"`
			Members []struct{ Name, Addr, State string }
		}
		if err := json.Unmarshal(e.get("/cluster", "").body, &cv); err != nil || cv.Self != e.cfg.Node.Name || len(cv.Members) == 0 {
			t.Errorf("/cluster %+v (%v)", cv, err)
		}
	})

	t.Run("token", func(t *testing.T) {
		const token = "admin-secret-token"
		e := newEnv(t, envConfig{adminToken: token, tenants: []config.Tenant{tenantCfg("acme", 10, 1000, 2)}})
		for _, p := range []string{"/healthz", "/readyz"} {
			if r := e.get(p, ""); r.status != 200 {
				t.Errorf("GET %s without token: %s", p, r)
			}
		}
		for _, p := range []string{"/cluster", "/metrics", "/tenants/acme", "/debug/pprof/", "/debug/pprof/heap"} {
			for _, bad := range []string{"", "wrong-token", keyOf("acme")} {
				r := e.get(p, bad)
				if r.status != 401 {
					t.Errorf("GET %s with token %q: %s, want 401", p, bad, r)
				} else {
					checkErrorShape(t, r, "")
				}
			}
			if r := e.get(p, token); r.status != 200 {
				t.Errorf("GET %s with the token: %s", p, r)
			}
		}
		// POST /admin/reload: the admin token, POST only, and a node
		// started in code has no config source to read again.
		for _, bad := range []string{"", "wrong-token"} {
			if r := e.post("/admin/reload", bad, nil, nil); r.status != 401 {
				t.Errorf("POST /admin/reload with token %q: %s, want 401", bad, r)
			}
		}
		if r := e.get("/admin/reload", token); r.status != 405 || r.header.Get("Allow") != "POST" {
			t.Errorf("GET /admin/reload: %s (Allow %q), want 405 with Allow: POST", r, r.header.Get("Allow"))
		}
		if r := e.post("/admin/reload", token, nil, nil); r.status != 409 || !strings.Contains(string(r.body), "no_config_source") {
			t.Errorf("POST /admin/reload without a config source: %s, want 409 no_config_source", r)
		} else {
			checkErrorShape(t, r, "")
		}
	})
}

// 2b. Usage the gateway asked for is hidden from every kind of stream whose
// client did not ask for it, and still settled.
func TestE2EStreamUsageHidden(t *testing.T) {
	cases := []struct {
		name string
		path string
		body []byte
	}{
		{"chat, include_usage false", "/v1/chat/completions",
			[]byte(`{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":false},"messages":[{"role":"user","content":"hello there"}]}`)},
		{"chat, stream_options without include_usage", "/v1/chat/completions",
			[]byte(`{"stream_options":{},"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hello there"}]}`)},
		{"legacy completions", "/v1/completions", completionsBody(openAIModel, 50, true)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envConfig{
				tenants: []config.Tenant{tenantCfg("acme", 1000, 1_000_000, 10)},
				fake:    fakeupstream.Options{CompletionMin: 25, CompletionMax: 25},
			})
			r := e.post(tc.path, keyOf("acme"), tc.body, nil)
			if r.status != http.StatusOK {
				t.Fatalf("%s", r)
			}
			evs := readAllEvents(t, bufio.NewReader(bytes.NewReader(r.body)))
			if len(evs) == 0 || evs[len(evs)-1].data != "[DONE]" {
				t.Fatalf("stream does not end with [DONE]: %s", truncate(string(r.body), 500))
			}
			for _, ev := range evs {
				if strings.Contains(ev.data, `"usage"`) {
					t.Errorf("client that did not ask for usage got a usage field: %s", ev.data)
				}
			}
			rec := e.waitRecords(1)[0]
			if !rec.IncludeUsage {
				t.Errorf("upstream was not asked for usage: %s", rec.Body)
			}
			e.waitSettled("acme", int64(rec.PromptTokens+rec.CompletionTokens))
		})
	}
}

// 10b. Streams cut or slowed by the upstream: no hang, the slot is freed and
// the tokens billed are bounded by what was generated.
func TestE2EUpstreamStreamTimeouts(t *testing.T) {
	t.Parallel()
	const tpm = 1_000_000
	t.Run("stall past stream_idle_timeout", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envConfig{
			tenants:           []config.Tenant{tenantCfg("acme", 1000, tpm, 10)},
			upstreamTimeout:   5 * time.Second,
			streamIdleTimeout: 150 * time.Millisecond,
			fake:              fakeupstream.Options{ChunkInterval: 600 * time.Millisecond, CompletionMin: 10, CompletionMax: 10},
		})
		r := e.post("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 2000, true, false), nil)
		if r.status != http.StatusOK {
			t.Fatalf("%s", r)
		}
		if bytes.Contains(r.body, []byte("[DONE]")) {
			t.Fatalf("a stream silent for 600ms past a 150ms stream_idle_timeout ran to its end: %s", truncate(string(r.body), 300))
		}
		rl := e.checkRateHeaders(r)
		prompt := tpm - rl.remainingTok - 256
		v := e.waitTenant("acme", "in_flight 0", func(v tenantView) bool { return v.InFlight.Used == 0 })
		// The upstream connection is closed: the provider stops generating
		// (it notices at its next writes).
		var rec fakeupstream.Record
		if !poll(settleWait, func() bool { rec = e.fake.Records()[0]; return rec.Aborted && !rec.Finished.IsZero() }) {
			t.Fatalf("upstream stream never aborted: %+v", rec)
		}
		if v.Tokens.Used < prompt || v.Tokens.Used > prompt+int64(rec.CompletionTokens) {
			t.Errorf("cut stream billed %d tokens, want within [%d, %d]", v.Tokens.Used, prompt, prompt+int64(rec.CompletionTokens))
		}
	})
	t.Run("chunks slower than timeout but within stream_idle_timeout", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envConfig{
			tenants:           []config.Tenant{tenantCfg("acme", 1000, tpm, 10)},
			upstreamTimeout:   300 * time.Millisecond,
			streamIdleTimeout: 5 * time.Second,
			fake:              fakeupstream.Options{ChunkInterval: 400 * time.Millisecond, CompletionMin: 3, CompletionMax: 3},
		})
		r := e.post("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 2000, true, false), nil)
		if r.status != http.StatusOK || !bytes.Contains(r.body, []byte("data: [DONE]")) {
			t.Fatalf("stream with 400ms gaps (timeout 300ms, stream_idle_timeout 5s) did not complete: %s", r)
		}
		rec := e.waitRecords(1)[0]
		if rec.Aborted {
			t.Errorf("upstream record aborted: %+v", rec)
		}
		e.waitSettled("acme", int64(rec.PromptTokens+rec.CompletionTokens))
	})
	t.Run("upstream dies mid-stream", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envConfig{
			tenants: []config.Tenant{tenantCfg("acme", 1000, tpm, 1)},
			fake:    fakeupstream.Options{ChunkInterval: 50 * time.Millisecond, CompletionMin: 1000, CompletionMax: 1000},
		})
		resp := e.openStream("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 2000, true, false), nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		rl := e.checkRateHeaders(reply{status: resp.StatusCode, header: resp.Header})
		prompt := tpm - rl.remainingTok - 256
		br := bufio.NewReader(resp.Body)
		for {
			ev, err := readEvent(br)
			if err != nil {
				t.Fatal(err)
			}
			if chunkText(t, ev) != "" {
				break
			}
		}
		if err := e.fake.Close(); err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(br) // ends, with or without an error: it must not hang
		if bytes.Contains(rest, []byte("[DONE]")) {
			t.Errorf("stream cut by the upstream ended with [DONE]")
		}
		v := e.waitTenant("acme", "in_flight 0", func(v tenantView) bool { return v.InFlight.Used == 0 })
		rec := e.fake.Records()[0]
		if !rec.Aborted {
			t.Errorf("upstream record not aborted: %+v", rec)
		}
		if v.Tokens.Used < prompt+1 || v.Tokens.Used > prompt+int64(rec.CompletionTokens) {
			t.Errorf("cut stream billed %d tokens, want within [%d, %d]", v.Tokens.Used, prompt+1, prompt+int64(rec.CompletionTokens))
		}
	})
}
