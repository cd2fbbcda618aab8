package upstream

import (
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func BenchmarkStreamFilter(b *testing.B) {
	for _, tc := range streamCases() {
		if strings.Contains(tc.name, "crlf") {
			continue
		}
		b.Run(strings.ReplaceAll(tc.name, " ", "_"), func(b *testing.B) {
			in := []byte(tc.input)
			nEvents := len(events(tc.input))
			nop := func([]byte) error { return nil }
			f := NewStreamFilter(tc.kind, tc.wantsUsage)
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				f.Reset(tc.kind, tc.wantsUsage)
				// Providers write about one event per read, often split.
				for i := 0; i < len(in); i += 128 {
					_ = f.Write(in[i:min(i+128, len(in))], nop)
				}
				_ = f.Close(nop)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*nEvents), "ns/event")
		})
	}
}

var benchRequest Request

func BenchmarkParseRequest(b *testing.B) {
	body := []byte(`{"model":"gpt-4o-mini","stream":true,"max_tokens":256,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Write a haiku about rate limits."}]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r, err := ParseRequest(Chat, body)
		if err != nil {
			b.Fatal(err)
		}
		benchRequest = r
	}
}

func BenchmarkPrepareBody(b *testing.B) {
	body := []byte(`{"model":"gpt-4o-mini","stream":true,"max_tokens":256,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Write a haiku about rate limits."}]}`)
	r, _ := ParseRequest(Chat, body)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := PrepareBody(r, body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseRequestLarge parses a chat request with a 64 KiB prompt of
// mixed ASCII and multi-byte text, where a per-byte pass over the body (the
// UTF-8 check) shows most.
func BenchmarkParseRequestLarge(b *testing.B) {
	text := strings.Repeat("Rate limits keep tenants apart; débit limité, 速率限制. ", 1200)[:64<<10]
	text = strings.ToValidUTF8(text, "")
	body := []byte(`{"model":"gpt-4o-mini","max_tokens":256,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"` + text + `"}]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r, err := ParseRequest(Chat, body)
		if err != nil {
			b.Fatal(err)
		}
		benchRequest = r
	}
}

// BenchmarkPrepare fills an upstream request from a client's, as every
// admitted call does.
func BenchmarkPrepare(b *testing.B) {
	p, err := NewProvider(ProviderConfig{Name: "up", Kind: OpenAI, BaseURL: "http://127.0.0.1:1/v1", APIKey: "sk-upstream"})
	if err != nil {
		b.Fatal(err)
	}
	var client fasthttp.RequestHeader
	client.Set("Authorization", "Bearer sk-client")
	client.Set("Accept", "application/json")
	body := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)
	path := []byte("/v1/chat/completions")
	var req fasthttp.Request
	b.ReportAllocs()
	for b.Loop() {
		req.Reset()
		p.Prepare(&req, path, body, &client)
	}
}

// BenchmarkUsageFromJSON reads the usage of an answer with the usage last,
// as providers send it: a short one, and one with the logprobs of 500
// tokens (76 KB); and, in usage_first, of one that must be walked.
func BenchmarkUsageFromJSON(b *testing.B) {
	const choices = `"choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the fake provider, this is a reply of some words."},"finish_reason":"stop"}]`
	const usage = `"usage":{"prompt_tokens":14,"completion_tokens":16,"total_tokens":30}`
	const logprob = `{"token":" word","logprob":-0.0123,"bytes":[32,119,111,114,100],"top_logprobs":[{"token":" word","logprob":-0.0123,"bytes":[32,119,111,114,100]},{"token":" term","logprob":-4.5,"bytes":[32,116,101,114,109]}]}`
	logprobs := `"choices":[{"index":0,"message":{"role":"assistant","content":"` + strings.Repeat(" word", 500) + `"},"logprobs":{"content":[` +
		strings.TrimSuffix(strings.Repeat(logprob+",", 500), ",") + `]},"finish_reason":"stop"}]`
	for _, tc := range []struct{ name, body string }{
		{"usage_last", `{"id":"chatcmpl-1","object":"chat.completion","created":1764000000,"model":"gpt-4o-mini",` + choices + `,` + usage + `}`},
		{"usage_last_logprobs", `{"id":"chatcmpl-1","object":"chat.completion","created":1764000000,"model":"gpt-4o-mini",` + logprobs + `,` + usage + `}`},
		{"usage_first", `{"id":"chatcmpl-1",` + usage + `,"object":"chat.completion","created":1764000000,"model":"gpt-4o-mini",` + choices + `}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			body := []byte(tc.body)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if u := UsageFromJSON(OpenAI, body); u.Prompt != 14 {
					b.Fatalf("usage %+v", u)
				}
			}
		})
	}
}
