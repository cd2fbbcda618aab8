package fakeupstream

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// fixed makes every completion exactly n tokens.
func fixed(n int) Options { return Options{CompletionMin: n, CompletionMax: n} }

func TestJSONEndpoints(t *testing.T) {
	_, base := start(t, fixed(7))
	tests := []struct {
		name, path, body string
		header           map[string]string
		prompt           int
		check            func(t *testing.T, j gjson.Result)
		// expected record fields
		user, key, version string
	}{
		{
			name:   "chat",
			path:   "/v1/chat/completions",
			body:   `{"model":"gpt-4o","user":"u1","messages":[{"role":"system","content":"12345678"},{"role":"user","content":[{"type":"text","text":"1234"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"12345"}]}]}`,
			header: map[string]string{"Authorization": "Bearer sk-1"},
			prompt: 2 + 1 + 2,
			user:   "u1", key: "sk-1",
			check: func(t *testing.T, j gjson.Result) {
				expect(t, j, "object", "chat.completion")
				expect(t, j, "choices.0.message.role", "assistant")
				expect(t, j, "choices.0.message.content", GeneratedText(7))
				expect(t, j, "choices.0.finish_reason", "stop")
				expect(t, j, "usage.prompt_tokens", "5")
				expect(t, j, "usage.completion_tokens", "7")
				expect(t, j, "usage.total_tokens", "12")
			},
		},
		{
			name:   "completions",
			path:   "/v1/completions",
			body:   `{"model":"gpt-3.5-turbo-instruct","prompt":"12345678"}`,
			header: map[string]string{"x-api-key": "k2"},
			prompt: 2,
			key:    "k2",
			check: func(t *testing.T, j gjson.Result) {
				expect(t, j, "object", "text_completion")
				expect(t, j, "choices.0.text", GeneratedText(7))
				expect(t, j, "usage.prompt_tokens", "2")
				expect(t, j, "usage.completion_tokens", "7")
				expect(t, j, "usage.total_tokens", "9")
			},
		},
		{
			name:   "completions with token arrays",
			path:   "/v1/completions",
			body:   `{"model":"m","prompt":[[1,2,3],[4]]}`,
			prompt: 4,
			check:  func(t *testing.T, j gjson.Result) { expect(t, j, "usage.prompt_tokens", "4") },
		},
		{
			name:   "messages",
			path:   "/v1/messages",
			body:   `{"model":"claude-x","max_tokens":100,"system":[{"type":"text","text":"12345678"}],"metadata":{"user_id":"u9"},"messages":[{"role":"user","content":"1234"}]}`,
			header: map[string]string{"x-api-key": "ak", "anthropic-version": "2023-06-01"},
			prompt: 3,
			user:   "u9", key: "ak", version: "2023-06-01",
			check: func(t *testing.T, j gjson.Result) {
				expect(t, j, "type", "message")
				expect(t, j, "role", "assistant")
				expect(t, j, "model", "claude-x")
				expect(t, j, "content.0.type", "text")
				expect(t, j, "content.0.text", GeneratedText(7))
				expect(t, j, "stop_reason", "end_turn")
				expect(t, j, "usage.input_tokens", "3")
				expect(t, j, "usage.output_tokens", "7")
			},
		},
		{
			name:   "embeddings string",
			path:   "/v1/embeddings",
			body:   `{"model":"text-embedding-3-small","input":"12345678"}`,
			prompt: 2,
			check: func(t *testing.T, j gjson.Result) {
				expect(t, j, "object", "list")
				expect(t, j, "data.#", "1")
				expect(t, j, "data.0.object", "embedding")
				expect(t, j, "data.0.index", "0")
				expect(t, j, "data.0.embedding.#", fmt.Sprint(embeddingDims))
				expect(t, j, "usage.prompt_tokens", "2")
				expect(t, j, "usage.total_tokens", "2")
			},
		},
		{
			name:   "embeddings strings",
			path:   "/v1/embeddings",
			body:   `{"model":"e","input":["1234","12345","1"]}`,
			prompt: 1 + 2 + 1,
			check: func(t *testing.T, j gjson.Result) {
				expect(t, j, "data.#", "3")
				expect(t, j, "data.2.index", "2")
				expect(t, j, "usage.prompt_tokens", "4")
			},
		},
		{
			name:   "embeddings token arrays",
			path:   "/v1/embeddings",
			body:   `{"model":"e","input":[[1,2,3],[4,5]]}`,
			prompt: 5,
			check: func(t *testing.T, j gjson.Result) {
				expect(t, j, "data.#", "2")
				expect(t, j, "usage.prompt_tokens", "5")
			},
		},
		{
			name:   "embeddings one token array",
			path:   "/v1/embeddings",
			body:   `{"model":"e","input":[1,2,3]}`,
			prompt: 3,
			check:  func(t *testing.T, j gjson.Result) { expect(t, j, "data.#", "1") },
		},
		{
			name:   "model needing escapes",
			path:   "/v1/chat/completions",
			body:   `{"model":"a\"b\\c\n\u2028","messages":[]}`,
			check:  func(t *testing.T, j gjson.Result) { expect(t, j, "model", "a\"b\\c\n\u2028") },
			prompt: 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(mustRecords(t, base))
			r := do(t, http.MethodPost, base+tc.path, tc.body, tc.header)
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if !gjson.ValidBytes(r.body) {
				t.Fatalf("invalid JSON: %s", r.body)
			}
			tc.check(t, gjson.ParseBytes(r.body))

			recs := mustRecords(t, base)
			if len(recs) != before+1 {
				t.Fatalf("%d records, want %d", len(recs), before+1)
			}
			rec := recs[len(recs)-1]
			want := gjson.Get(tc.body, "model").String()
			if rec.Path != tc.path || rec.Model != want || rec.User != tc.user || rec.APIKey != tc.key ||
				rec.AnthropicVersion != tc.version || rec.Stream || rec.Status != 200 || rec.Aborted ||
				rec.PromptTokens != tc.prompt || rec.Finished.Before(rec.Received) {
				t.Errorf("record %+v", rec)
			}
		})
	}
}

func TestRecordBody(t *testing.T) {
	s, base := start(t, fixed(1))
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	post(t, base+"/v1/chat/completions", body)
	recs := s.Records()
	if len(recs) != 1 || string(recs[0].Body) != body {
		t.Fatalf("records %+v", recs)
	}
	recs[0].Body[0] = 'X' // a copy: must not change the server's record
	if got := s.Records()[0].Body; string(got) != body {
		t.Fatalf("Records shares Body: %s", got)
	}
}

// mustRecords reads the records through GET /_records.
func mustRecords(t *testing.T, base string) []Record {
	t.Helper()
	r := do(t, http.MethodGet, base+"/_records", "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /_records: %d %s", r.status, r.body)
	}
	if bytes.Contains(r.body, []byte(`"Body"`)) || bytes.Contains(r.body, []byte(`"body"`)) {
		t.Fatalf("GET /_records includes bodies: %s", r.body)
	}
	var recs []Record
	if err := json.Unmarshal(r.body, &recs); err != nil {
		t.Fatalf("GET /_records: %v: %s", err, r.body)
	}
	return recs
}

func expect(t *testing.T, j gjson.Result, path, want string) {
	t.Helper()
	if got := j.Get(path); !got.Exists() || got.String() != want {
		t.Errorf("%s = %q (exists %v), want %q in %s", path, got.String(), got.Exists(), want, j.Raw)
	}
}

func TestStreams(t *testing.T) {
	const n = 9
	_, base := start(t, fixed(n))
	tests := []struct {
		name, path, body string
		usage            bool
	}{
		{"chat", "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"12345678"}]}`, false},
		{"chat include_usage", "/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"12345678"}]}`, true},
		{"chat include_usage false", "/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":false},"messages":[{"role":"user","content":"12345678"}]}`, false},
		{"completions", "/v1/completions", `{"model":"m","stream":true,"prompt":"12345678"}`, false},
		{"completions include_usage", "/v1/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"prompt":"12345678"}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := post(t, base+tc.path, tc.body)
			if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("status %d, Content-Type %q: %s", r.status, r.header.Get("Content-Type"), r.body)
			}
			evs := parseEvents(t, r.body)
			if len(evs) == 0 || evs[len(evs)-1].data != "[DONE]" {
				t.Fatalf("stream does not end with [DONE]: %s", r.body)
			}
			evs = evs[:len(evs)-1]
			var text strings.Builder
			contentChunks, finish := 0, ""
			for i, ev := range evs {
				if !gjson.Valid(ev.data) {
					t.Fatalf("event %d: invalid JSON %q", i, ev.data)
				}
				j := gjson.Parse(ev.data)
				u := j.Get("usage")
				last := i == len(evs)-1
				switch {
				case tc.usage && last:
					if j.Get("choices.#").Int() != 0 || !j.Get("choices").IsArray() {
						t.Errorf("usage chunk has choices: %s", ev.data)
					}
					if u.Get("prompt_tokens").Int() != 2 || u.Get("completion_tokens").Int() != n || u.Get("total_tokens").Int() != n+2 {
						t.Errorf("usage chunk %s", ev.data)
					}
					continue
				case tc.usage:
					if !u.Exists() || u.Type != gjson.Null {
						t.Errorf("chunk %d: want \"usage\":null: %s", i, ev.data)
					}
				default:
					if u.Exists() {
						t.Errorf("chunk %d: unexpected usage: %s", i, ev.data)
					}
				}
				if j.Get("choices.#").Int() != 1 {
					t.Fatalf("chunk %d: choices %s", i, ev.data)
				}
				piece := j.Get("choices.0.delta.content")
				if tc.path == "/v1/completions" {
					piece = j.Get("choices.0.text")
					expect(t, j, "object", "text_completion")
				} else {
					expect(t, j, "object", "chat.completion.chunk")
				}
				if piece.String() != "" {
					contentChunks++
					text.WriteString(piece.String())
				}
				if fr := j.Get("choices.0.finish_reason"); fr.Type != gjson.Null {
					finish = fr.String()
				}
			}
			if contentChunks != n || text.String() != GeneratedText(n) || finish != "stop" {
				t.Errorf("%d content chunks, text %q, finish %q", contentChunks, text.String(), finish)
			}
			if got := defaultCountTokens("", text.String()); got != n {
				t.Errorf("default counter counts %d tokens in the text, want %d", got, n)
			}
		})
	}
}

func TestAnthropicStream(t *testing.T) {
	for _, n := range []int{1, 12} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			s, base := start(t, fixed(n))
			r := do(t, http.MethodPost, base+"/v1/messages",
				`{"model":"claude","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"12345678"}]}`,
				map[string]string{"anthropic-version": "2023-06-01"})
			evs := parseEvents(t, r.body)
			var names []string
			var text strings.Builder
			deltas := 0
			for _, ev := range evs {
				names = append(names, ev.name)
				if !gjson.Valid(ev.data) {
					t.Fatalf("invalid JSON %q", ev.data)
				}
				j := gjson.Parse(ev.data)
				expect(t, j, "type", ev.name)
				switch ev.name {
				case "message_start":
					expect(t, j, "message.usage.input_tokens", "2")
					expect(t, j, "message.usage.output_tokens", "1")
					expect(t, j, "message.model", "claude")
				case "content_block_delta":
					deltas++
					expect(t, j, "delta.type", "text_delta")
					text.WriteString(j.Get("delta.text").String())
				case "message_delta":
					expect(t, j, "usage.output_tokens", fmt.Sprint(n)) // cumulative
					expect(t, j, "delta.stop_reason", "end_turn")
				}
			}
			want := []string{"message_start", "content_block_start", "ping"}
			for range n {
				want = append(want, "content_block_delta")
			}
			want = append(want, "content_block_stop", "message_delta", "message_stop")
			if strings.Join(names, ",") != strings.Join(want, ",") {
				t.Errorf("events %v, want %v", names, want)
			}
			if deltas != n || text.String() != GeneratedText(n) {
				t.Errorf("%d deltas, text %q", deltas, text.String())
			}
			rec := s.Records()[0]
			if !rec.Stream || rec.Aborted || rec.PromptTokens != 2 || rec.CompletionTokens != n || rec.Finished.IsZero() {
				t.Errorf("record %+v", rec)
			}
		})
	}
}

func TestMaxTokensCap(t *testing.T) {
	_, base := start(t, fixed(50))
	tests := []struct {
		name, path, body, tokens, reason string
	}{
		{"chat max_tokens", "/v1/chat/completions", `{"max_tokens":5,"messages":[]}`, "usage.completion_tokens", "choices.0.finish_reason=length"},
		{"chat max_completion_tokens", "/v1/chat/completions", `{"max_completion_tokens":6,"max_tokens":40,"messages":[]}`, "usage.completion_tokens", "choices.0.finish_reason=length"},
		{"chat above draw", "/v1/chat/completions", `{"max_tokens":500,"messages":[]}`, "usage.completion_tokens", "choices.0.finish_reason=stop"},
		{"completions", "/v1/completions", `{"max_tokens":3,"prompt":"x"}`, "usage.completion_tokens", "choices.0.finish_reason=length"},
		{"messages", "/v1/messages", `{"max_tokens":4,"messages":[]}`, "usage.output_tokens", "stop_reason=max_tokens"},
		{"messages above draw", "/v1/messages", `{"max_tokens":4096,"messages":[]}`, "usage.output_tokens", "stop_reason=end_turn"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			limit := gjson.Get(tc.body, "max_completion_tokens").Int()
			if limit == 0 {
				limit = gjson.Get(tc.body, "max_tokens").Int()
			}
			want := min(limit, 50)
			j := gjson.ParseBytes(post(t, base+tc.path, tc.body).body)
			expect(t, j, tc.tokens, fmt.Sprint(want))
			path, reason, _ := strings.Cut(tc.reason, "=")
			expect(t, j, path, reason)

			// The stream is capped the same way.
			stream := strings.Replace(tc.body, "{", `{"stream":true,`, 1)
			evs := parseEvents(t, post(t, base+tc.path, stream).body)
			pieces := 0
			for _, ev := range evs {
				j := gjson.Parse(ev.data)
				if j.Get("delta.text").String() != "" || j.Get("choices.0.delta.content").String() != "" || j.Get("choices.0.text").String() != "" {
					pieces++
				}
			}
			if pieces != int(want) {
				t.Errorf("stream has %d pieces, want %d", pieces, want)
			}
		})
	}
}

func TestNoUsage(t *testing.T) {
	o := fixed(5)
	o.NoUsage = true
	s, base := start(t, o)
	tests := []struct{ name, path, body string }{
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"1234"}]}`},
		{"chat stream", "/v1/chat/completions", `{"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"1234"}]}`},
		{"completions stream", "/v1/completions", `{"stream":true,"stream_options":{"include_usage":true},"prompt":"1234"}`},
		{"messages", "/v1/messages", `{"messages":[{"role":"user","content":"1234"}]}`},
		{"messages stream", "/v1/messages", `{"stream":true,"messages":[{"role":"user","content":"1234"}]}`},
		{"embeddings", "/v1/embeddings", `{"input":"1234"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s.Reset()
			r := post(t, base+tc.path, tc.body)
			if r.status != 200 {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			if bytes.Contains(r.body, []byte("usage")) || bytes.Contains(r.body, []byte("_tokens")) {
				t.Errorf("usage reported: %s", r.body)
			}
			recs := s.Records()
			wantCompletion := 5
			if tc.path == "/v1/embeddings" {
				wantCompletion = 0
			}
			// The record still holds what would have been reported.
			if len(recs) != 1 || recs[0].PromptTokens != 1 || recs[0].CompletionTokens != wantCompletion {
				t.Errorf("records %+v", recs)
			}
		})
	}
}

func TestStatusOverride(t *testing.T) {
	s, base := start(t, Options{Status: 429})
	tests := []struct {
		status        int
		path, body    string
		typ, codeJSON string
	}{
		{429, "/v1/chat/completions", `{"messages":[]}`, "rate_limit_error", `"rate_limit_exceeded"`},
		{503, "/v1/chat/completions", `{"stream":true,"messages":[]}`, "server_error", "null"},
		{500, "/v1/messages", `{"messages":[]}`, "server_error", "null"},
		{502, "/v1/embeddings", `not json`, "server_error", "null"},
		{401, "/v1/completions", `{}`, "invalid_request_error", `"invalid_api_key"`},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.status, tc.path), func(t *testing.T) {
			s.SetOptions(Options{Status: tc.status})
			r := post(t, base+tc.path, tc.body)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d", r.status, tc.status)
			}
			j := gjson.ParseBytes(r.body)
			if !j.Get("error.message").Exists() || j.Get("error.type").String() != tc.typ || j.Get("error.code").Raw != tc.codeJSON {
				t.Errorf("error body %s", r.body)
			}
			recs := s.Records()
			if rec := recs[len(recs)-1]; rec.Status != tc.status || rec.Path != tc.path {
				t.Errorf("record %+v", rec)
			}
		})
	}
	s.SetOptions(Options{})
	if r := post(t, base+"/v1/chat/completions", `{"messages":[]}`); r.status != 200 {
		t.Fatalf("after clearing Status: %d %s", r.status, r.body)
	}
}

func TestErrors(t *testing.T) {
	_, base := start(t, Options{})
	tests := []struct {
		name, method, path, body string
		status                   int
	}{
		{"malformed JSON", "POST", "/v1/chat/completions", `{"messages":[`, 400},
		{"empty body", "POST", "/v1/messages", ``, 400},
		{"not an object", "POST", "/v1/embeddings", `["x"]`, 400},
		{"unknown path", "POST", "/v1/nothing", `{}`, 404},
		{"GET on API", "GET", "/v1/chat/completions", ``, 405},
		{"GET reset", "GET", "/_reset", ``, 405},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, tc.method, base+tc.path, tc.body, nil)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			if j := gjson.ParseBytes(r.body); j.Get("error.message").String() == "" || !j.Get("error.type").Exists() {
				t.Errorf("not an OpenAI-style error: %s", r.body)
			}
		})
	}
}

func TestErrorHandlerBodyTooLarge(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	var ctx fasthttp.RequestCtx
	s.errorHandler(&ctx, fmt.Errorf("reading: %w", fasthttp.ErrBodyTooLarge))
	if ctx.Response.StatusCode() != 413 || !gjson.GetBytes(ctx.Response.Body(), "error.message").Exists() {
		t.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}

// TestStreamFlushesEachEvent: with a chunk interval of an hour only the
// opening events can be written, so reading them proves they were flushed
// without waiting for the end of the stream. (A client that hangs up is
// only noticed at the next write, so Close ends these streams.)
func TestStreamFlushesEachEvent(t *testing.T) {
	tests := []struct{ path, body, first string }{
		{"/v1/chat/completions", `{"stream":true,"messages":[]}`, ""},
		{"/v1/messages", `{"stream":true,"messages":[]}`, "message_start"},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			o := fixed(3)
			o.ChunkInterval = time.Hour
			s, base := start(t, o)
			resp := openStream(t, base+tc.path, tc.body)
			defer resp.Body.Close()
			ev, err := readEvent(bufio.NewReader(resp.Body))
			if err != nil || ev.name != tc.first || !gjson.Valid(ev.data) {
				t.Fatalf("first event %+v, %v", ev, err)
			}
			if s.InFlight() != 1 {
				t.Errorf("InFlight %d during the stream", s.InFlight())
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if rec := s.Records()[0]; s.InFlight() != 0 || !rec.Aborted || rec.CompletionTokens != 0 {
				t.Errorf("after Close: InFlight %d, record %+v", s.InFlight(), rec)
			}
		})
	}
}

func TestClientDisconnect(t *testing.T) {
	tests := []struct {
		name     string
		interval time.Duration
		path     string
		body     string
	}{
		{"chat paced", 2 * time.Millisecond, "/v1/chat/completions", `{"stream":true,"stream_options":{"include_usage":true},"messages":[]}`},
		{"chat unpaced", 0, "/v1/chat/completions", `{"stream":true,"messages":[]}`},
		{"completions paced", time.Millisecond, "/v1/completions", `{"stream":true,"prompt":"x"}`},
		{"messages paced", 2 * time.Millisecond, "/v1/messages", `{"stream":true,"messages":[]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const huge = 100_000_000
			o := fixed(huge)
			o.ChunkInterval = tc.interval
			s, base := start(t, o)
			resp := openStream(t, base+tc.path, tc.body)
			r := bufio.NewReader(resp.Body)
			for range 5 {
				if _, err := readEvent(r); err != nil {
					t.Fatalf("reading the stream: %v", err)
				}
			}
			resp.Body.Close()
			eventually(t, "InFlight == 0", func() bool { return s.InFlight() == 0 })
			recs := s.Records()
			if len(recs) != 1 {
				t.Fatalf("%d records", len(recs))
			}
			rec := recs[0]
			if !rec.Aborted || rec.Finished.IsZero() || rec.CompletionTokens >= huge || rec.CompletionTokens < 2 {
				t.Errorf("record %+v", rec)
			}
		})
	}
}

func TestInFlightAndReset(t *testing.T) {
	// Streams that never end by themselves, paced so that a client hanging
	// up is noticed quickly.
	o := fixed(100_000_000)
	o.ChunkInterval = 10 * time.Millisecond
	s, base := start(t, o)
	post(t, base+"/v1/embeddings", `{"input":"x"}`)
	if s.InFlight() != 0 || s.MaxInFlight() != 1 {
		t.Fatalf("after one request: InFlight %d, MaxInFlight %d", s.InFlight(), s.MaxInFlight())
	}
	const k = 4
	var bodies []*bufio.Reader
	var resps []*http.Response
	for range k {
		resp := openStream(t, base+"/v1/chat/completions", `{"stream":true,"messages":[]}`)
		r := bufio.NewReader(resp.Body)
		if _, err := readEvent(r); err != nil {
			t.Fatal(err)
		}
		resps, bodies = append(resps, resp), append(bodies, r)
	}
	if s.InFlight() != k || s.MaxInFlight() != k || len(bodies) != k {
		t.Fatalf("InFlight %d, MaxInFlight %d, want %d", s.InFlight(), s.MaxInFlight(), k)
	}
	s.Reset()
	if len(s.Records()) != 0 || s.MaxInFlight() != k {
		t.Fatalf("after Reset with %d in flight: %d records, MaxInFlight %d", k, len(s.Records()), s.MaxInFlight())
	}
	for _, resp := range resps {
		resp.Body.Close()
	}
	eventually(t, "InFlight == 0", func() bool { return s.InFlight() == 0 })
	if s.MaxInFlight() != k {
		t.Errorf("MaxInFlight %d, want %d", s.MaxInFlight(), k)
	}
	if r := post(t, base+"/_reset", ``); r.status != 200 {
		t.Fatalf("POST /_reset: %d", r.status)
	}
	if s.MaxInFlight() != 0 || len(mustRecords(t, base)) != 0 {
		t.Fatalf("after POST /_reset: MaxInFlight %d", s.MaxInFlight())
	}
}

func TestCloseCutsStreamsAndSleepers(t *testing.T) {
	o := fixed(5)
	o.ChunkInterval = time.Hour
	s := New(o)
	addr, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr
	resp := openStream(t, base+"/v1/chat/completions", `{"stream":true,"messages":[]}`)
	defer resp.Body.Close()
	if _, err := readEvent(bufio.NewReader(resp.Body)); err != nil {
		t.Fatal(err)
	}
	o.Latency = time.Hour
	s.SetOptions(o)
	sleeper := make(chan error, 1)
	go func() {
		_, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
		sleeper <- err
	}()
	eventually(t, "two requests in flight", func() bool { return s.InFlight() == 2 })

	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs with a stream and a sleeping request in flight")
	}
	if err := <-sleeper; err == nil {
		// The sleeper may get its 503 before the connection is cut.
		t.Log("sleeping request answered before the connection was closed")
	}
	if s.InFlight() != 0 {
		t.Errorf("InFlight %d after Close", s.InFlight())
	}
	if recs := s.Records(); len(recs) != 2 || !recs[0].Aborted {
		t.Errorf("records %+v", recs)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Start("127.0.0.1:0"); err == nil {
		t.Error("Start after Close succeeded")
	}
}

func TestSeedAndRange(t *testing.T) {
	draws := func(seed int64) []int {
		s := New(Options{CompletionMin: 3, CompletionMax: 9, Seed: seed})
		defer s.Close()
		var out []int
		for range 50 {
			out = append(out, s.drawCompletion(s.opts.Load()))
		}
		return out
	}
	a, b, c := draws(1), draws(1), draws(2)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("same seed, different draws:\n%v\n%v", a, b)
	}
	if fmt.Sprint(a) == fmt.Sprint(c) {
		t.Errorf("different seeds, same draws: %v", a)
	}
	seen := map[int]bool{}
	for _, n := range append(a, c...) {
		if n < 3 || n > 9 {
			t.Fatalf("draw %d outside [3, 9]", n)
		}
		seen[n] = true
	}
	if len(seen) != 7 {
		t.Errorf("draws cover %v, want all of 3..9", seen)
	}
	if o := New(Options{}).opts.Load(); o.CompletionMin != 20 || o.CompletionMax != 200 {
		t.Errorf("defaults %d..%d", o.CompletionMin, o.CompletionMax)
	}
}

func TestCustomCountTokens(t *testing.T) {
	o := fixed(1)
	var mu sync.Mutex
	var seen []string
	o.CountTokens = func(model, text string) int {
		mu.Lock()
		seen = append(seen, model+":"+text)
		mu.Unlock()
		return 10
	}
	s, base := start(t, o)
	post(t, base+"/v1/messages", `{"model":"c","system":"s","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":"d"}]}`)
	if rec := s.Records()[0]; rec.PromptTokens != 40 {
		t.Errorf("PromptTokens %d, want 40", rec.PromptTokens)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(seen, ","); got != "c:a,c:b,c:d,c:s" {
		t.Errorf("counted pieces %s", got)
	}
}

func TestMaxRecords(t *testing.T) {
	s, base := start(t, Options{MaxRecords: 3})
	for i := range 5 {
		post(t, base+"/v1/embeddings", fmt.Sprintf(`{"model":"m%d","input":"x"}`, i))
	}
	var models []string
	for _, r := range s.Records() {
		models = append(models, r.Model)
	}
	if strings.Join(models, ",") != "m2,m3,m4" {
		t.Errorf("records kept %v", models)
	}
}

// TestConcurrentSetOptions exercises SetOptions, Records and Reset against
// concurrent requests (meaningful under -race).
func TestConcurrentSetOptions(t *testing.T) {
	s, base := start(t, fixed(3))
	stop := make(chan struct{})
	var writer sync.WaitGroup
	writer.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			s.SetOptions(Options{CompletionMin: 1, CompletionMax: 1 + i%5, Seed: int64(i)})
			_ = s.Records()
			if i%10 == 0 {
				s.Reset()
			}
			time.Sleep(100 * time.Microsecond)
		}
	})
	var clients sync.WaitGroup
	for range 4 {
		clients.Go(func() {
			for range 25 {
				for _, p := range []string{"/v1/chat/completions", "/v1/messages"} {
					resp, err := client.Post(base+p, "application/json", strings.NewReader(`{"stream":true,"messages":[]}`))
					if err != nil {
						t.Errorf("%s: %v", p, err)
						return
					}
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err != nil || resp.StatusCode != 200 {
						t.Errorf("%s: %d %v", p, resp.StatusCode, err)
					}
				}
			}
		})
	}
	clients.Wait()
	close(stop)
	writer.Wait()
	eventually(t, "InFlight == 0", func() bool { return s.InFlight() == 0 })
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"b\s`, "\n\r\t\x00\x1f", "é€😀", "\u2028\u2029", "bad\xffutf8", "<&>"} {
		b := appendJSONString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Errorf("%q: %s: %v", s, b, err)
			continue
		}
		want := strings.ToValidUTF8(s, "\ufffd")
		if got != want {
			t.Errorf("%q: round trip %q", s, got)
		}
	}
}

// TestSequentialRequestsNeverOverlap: a client that sends its next request
// only after receiving the whole previous answer must never be seen with two
// requests in flight (the guard behind InFlight's accounting). It also runs
// the fasthttp client, the one the gateway uses.
func TestSequentialRequestsNeverOverlap(t *testing.T) {
	s, base := start(t, Options{CompletionMin: 1, CompletionMax: 30})
	if s.srv.WriteTimeout != 0 {
		t.Fatalf("WriteTimeout %v would cut long streams", s.srv.WriteTimeout)
	}
	c := &fasthttp.Client{}
	bodies := []string{
		`{"messages":[]}`,
		`{"stream":true,"messages":[]}`,
		`{"stream":true,"stream_options":{"include_usage":true},"messages":[]}`,
	}
	paths := []string{"/v1/chat/completions", "/v1/messages", "/v1/completions"}
	for i := range 150 {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI(base + paths[i%len(paths)])
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetBodyString(bodies[i/len(paths)%len(bodies)])
		if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
			t.Fatalf("request %d: %v %d %s", i, err, resp.StatusCode(), resp.Body())
		}
		if n := s.InFlight(); n != 0 {
			t.Fatalf("request %d: InFlight %d after the whole answer was received", i, n)
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
	if m := s.MaxInFlight(); m != 1 {
		t.Fatalf("MaxInFlight %d for strictly sequential requests", m)
	}
}

// TestStreamEndNeverInFlight: a client that reads a stream up to its last
// event (without waiting for the end of the HTTP body) must not find the
// request still in flight.
func TestStreamEndNeverInFlight(t *testing.T) {
	s, base := start(t, Options{CompletionMin: 1, CompletionMax: 5})
	tests := []struct{ path, body, last string }{
		{"/v1/chat/completions", `{"stream":true,"messages":[]}`, "[DONE]"},
		{"/v1/completions", `{"stream":true,"stream_options":{"include_usage":true},"prompt":""}`, "[DONE]"},
		{"/v1/messages", `{"stream":true,"messages":[]}`, `{"type":"message_stop"}`},
	}
	for i := range 300 {
		tc := tests[i%len(tests)]
		resp, err := client.Post(base+tc.path, "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(resp.Body)
		for {
			ev, err := readEvent(r)
			if err != nil {
				t.Fatalf("%s: stream ended without %s: %v", tc.path, tc.last, err)
			}
			if ev.data == tc.last {
				break
			}
		}
		if n := s.InFlight(); n != 0 {
			t.Fatalf("%s: InFlight %d after the last event was received", tc.path, n)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
