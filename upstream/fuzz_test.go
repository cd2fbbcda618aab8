package upstream

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func FuzzParseRequest(f *testing.F) {
	seeds := []struct {
		ep   Endpoint
		body string
	}{
		{Chat, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`},
		{Chat, `{"model":"m","stream":true,"stream_options":{"include_usage":false,"x":1},"max_completion_tokens":9,"n":2,"messages":[{"role":"user","content":[{"type":"text","text":"a\u00e9"}]},{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}],"tools":[{}]}`},
		{Chat, `{"model":"m","stream":true,"stream_options":null,"messages":[{}]}`},
		{Chat, `{"model":"m","max_tokens":-1,"messages":[]}`},
		{Chat, `{"model":"m","max_tokens":1e400,"messages":"x"}`},
		{Chat, `[[[[{}]]]]`},
		{Chat, `{"model":"\ud800","messages":[{"content":[{"content":[{"content":"deep"}]}]}]}`},
		{Completions, `{"model":"m","prompt":["a",[1,2],3],"best_of":3,"stream":true}`},
		{Completions, `{"model":"m","prompt":[[1,"x"]]}`},
		{Embeddings, `{"model":"m","input":[[1,2],[3]]}`},
		{Embeddings, `{"model":"m","input":null}`},
		{Messages, `{"model":"c","max_tokens":10,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"tool_result","content":[{"type":"text","text":"r"}]},{"type":"tool_use","input":{"a":[1]}}]}]}`},
		{Messages, `{"model":"c","max_tokens":"10","messages":[]}`},
		{Messages, `{"model":"c","model":"d"}`},
		{Responses, `{"model":"m","instructions":"i","input":[{"role":"user","content":[{"type":"input_text","text":"t"}]},{"type":"function_call_output","output":"o"},{"type":"x"}],"max_output_tokens":5,"stream":true}`},
		{Responses, `{"model":"m","input":[1]}`},
		{Chat, "{\"model\":\"m\",\"messages\":[{\"content\":\"\xff\"}]}"},
		{Chat, ``},
		{Chat, `  {  } `},
	}
	for _, s := range seeds {
		f.Add(uint8(s.ep), []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, e uint8, body []byte) {
		ep := Endpoint(e%uint8(Responses) + 1)
		orig := string(body)
		r, err := ParseRequest(ep, body)
		if string(body) != orig {
			t.Fatal("ParseRequest modified the body")
		}
		if err != nil {
			var ce *ClientError
			if !errors.As(err, &ce) || ce.Status != 400 || ce.Code == "" || ce.Message == "" {
				t.Fatalf("error %#v", err)
			}
			if !json.Valid(ce.Body(OpenAI)) || !json.Valid(ce.Body(Anthropic)) {
				t.Fatalf("error body not JSON: %s", ce.Body(OpenAI))
			}
			return
		}
		if r.Endpoint != ep || r.Model == "" || r.MaxTokens < 0 || r.MaxTokens > maxMaxTokens ||
			r.TokenInputs < 0 || r.Generates != (ep != Embeddings) ||
			(ep == Messages && r.MaxTokens == 0) || ((ep == Chat || ep == Messages) && r.Messages == 0) ||
			(r.Generates && (r.Choices < 1 || r.Choices > maxChoices)) {
			t.Fatalf("implausible request %+v", r)
		}
		if utf8.Valid(body) {
			var v struct{ Model string }
			if json.Unmarshal(body, &v) != nil || v.Model != r.Model {
				t.Fatalf("encoding/json disagrees: %q vs %q", v.Model, r.Model)
			}
		}
		out, err := PrepareBody(r, body)
		if err != nil {
			t.Fatalf("PrepareBody: %v", err)
		}
		if string(body) != orig {
			t.Fatal("PrepareBody modified the body")
		}
		if string(out) != orig {
			r2, err := ParseRequest(ep, out)
			if err != nil || !r2.ClientWantsUsage || r2.Model != r.Model || r2.MaxTokens != r.MaxTokens {
				t.Fatalf("prepared body %s: %+v, %v", out, r2, err)
			}
		}
	})
}

func FuzzStreamFilter(f *testing.F) {
	f.Add(uint8(0), uint64(1), []byte(openAIStream(true)))
	f.Add(uint8(1), uint64(2), []byte(openAIStream(true)))
	f.Add(uint8(2), uint64(3), []byte(anthropicStream))
	f.Add(uint8(0), uint64(4), []byte(strings.ReplaceAll(openAIStream(true), "\n", "\r\n")))
	f.Add(uint8(0), uint64(5), []byte("data: {\"usage\":null,\"choices\":[{\"delta\":{\"content\":\"\\ud83d\\ude00\"}}]}\n\n: x\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":1e3}}"))
	f.Add(uint8(2), uint64(6), []byte("data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":-1,\"input_tokens\":9e99}}\n\n"))
	f.Fuzz(func(t *testing.T, mode uint8, seed uint64, in []byte) {
		kind, wants := OpenAI, mode%3 == 1
		if mode%3 == 2 {
			kind = Anthropic
		}
		whole := NewStreamFilter(kind, wants)
		a := run(t, whole, string(in), []int{len(in) + 1})
		chunked := NewStreamFilter(kind, wants)
		sizes := []int{int(seed%7) + 1, int(seed>>8%31) + 1, int(seed>>16%3) + 1}
		b := run(t, chunked, string(in), sizes)
		if strings.Join(a, "\x00") != strings.Join(b, "\x00") {
			t.Fatalf("chunking changed the output:\n%q\n%q", a, b)
		}
		if whole.Usage() != chunked.Usage() || string(whole.Text()) != string(chunked.Text()) ||
			whole.TextBytes() != chunked.TextBytes() {
			t.Fatalf("chunking changed usage or text")
		}
		if u := whole.Usage(); u.Prompt < 0 || u.Completion < 0 || (!u.Reported && u != Usage{}) {
			t.Fatalf("usage %+v", u)
		}
		if (kind == Anthropic || wants) && strings.Join(a, "") != string(in) {
			t.Fatalf("pass-through changed the stream")
		}
	})
}
