package upstream

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

func TestUsageFromJSON(t *testing.T) {
	tests := []struct {
		name string
		kind Kind
		body string
		want Usage
	}{
		{"openai chat", OpenAI, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hi \"usage\": {}"},"finish_reason":"stop"}],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":0}}}`,
			Usage{19, 10, true}},
		{"openai completions", OpenAI, `{"id":"cmpl-1","object":"text_completion","choices":[{"text":"x","index":0}],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}`,
			Usage{5, 7, true}},
		{"openai embeddings", OpenAI, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,-0.2]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}`,
			Usage{8, 0, true}},
		{"openai spaced", OpenAI, "{\n  \"usage\" : { \"completion_tokens\" : 3 , \"prompt_tokens\" : 4 }\n}", Usage{4, 3, true}},
		{"openai no usage", OpenAI, `{"choices":[]}`, Usage{}},
		{"openai null usage", OpenAI, `{"usage":null}`, Usage{}},
		{"openai nested only", OpenAI, `{"x":{"usage":{"prompt_tokens":1}}}`, Usage{}},
		{"openai garbage", OpenAI, `{"usage":{"prompt_tokens":`, Usage{}},
		{"openai negative", OpenAI, `{"usage":{"prompt_tokens":-3,"completion_tokens":2.9}}`, Usage{0, 2, true}},
		{"not json", OpenAI, `<html>`, Usage{}},
		{"openai responses", OpenAI, `{"id":"resp_1","object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"Hi"}]}],"usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":123}}`,
			Usage{36, 87, true}},
		{"openai responses usage then user and metadata", OpenAI, `{"id":"resp_1","object":"response","output":[{"type":"message","content":[{"type":"output_text","text":"Hi"}]}],"usage":{"input_tokens":36,"output_tokens":87,"total_tokens":123},"user":null,"metadata":{"usage":"x"}}`,
			Usage{36, 87, true}},
		{"openai usage twice, the last read", OpenAI, `{"usage":{"prompt_tokens":1},"x":[],"usage":{"prompt_tokens":2}}`, Usage{2, 0, true}},
		{"openai nested usage last", OpenAI, `{"usage":{"prompt_tokens":3},"x":{"usage":{"prompt_tokens":4}}}`, Usage{3, 0, true}},
		{"openai usage key escaped, last", OpenAI, `{"usage":{"prompt_tokens":1,"completion_tokens":1},"us\u0061ge":{"prompt_tokens":5,"completion_tokens":2}}`, Usage{5, 2, true}},
		{"openai usage key escaped, alone", OpenAI, `{"id":"x","us\u0061ge":{"prompt_\u0074okens":5}}`, Usage{5, 0, true}},
		{"openai usage escaped then plain", OpenAI, `{"us\u0061ge":{"prompt_tokens":5},"usage":{"prompt_tokens":6}}`, Usage{6, 0, true}},
		// Not valid JSON: what ends it as a usage member is read.
		{"openai malformed, usage at its end", OpenAI, `{"choices":[{"text":"x"},"usage":{"prompt_tokens":5}}`, Usage{5, 0, true}},
		{"anthropic", Anthropic, `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"Hi"}],"model":"claude","stop_reason":"end_turn","usage":{"input_tokens":25,"cache_creation_input_tokens":100,"cache_read_input_tokens":50,"output_tokens":12}}`,
			Usage{175, 12, true}},
		{"anthropic null caches", Anthropic, `{"usage":{"input_tokens":25,"cache_creation_input_tokens":null,"output_tokens":12}}`, Usage{25, 12, true}},
		{"anthropic no usage", Anthropic, `{"type":"error","error":{"type":"overloaded_error","message":"x"}}`, Usage{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := UsageFromJSON(tc.kind, []byte(tc.body)); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	body := []byte(tests[0].body)
	if a := testing.AllocsPerRun(100, func() { UsageFromJSON(OpenAI, body) }); a != 0 {
		t.Errorf("UsageFromJSON allocates %v", a)
	}
}

func TestAppendString(t *testing.T) {
	tests := []struct{ in, want string }{
		{`"plain"`, "plain"},
		{`"a\nb\t\"c\"\\\/"`, "a\nb\t\"c\"\\/"},
		{`"\u00e9\u4e2d"`, "é中"},
		{`"\ud83d\ude00!"`, "😀!"},
		{`"\ud83d x"`, "\ufffd x"},
		{`"\uZZZZ"`, "\ufffdZZZZ"},
		{`"\q"`, `\q`},
		{`"end\"`, `end\`},
		{`5`, ""},
		{`"`, ""},
	}
	for _, tc := range tests {
		got, n := appendString(nil, []byte(tc.in), 100)
		if string(got) != tc.want || n != len(tc.want) {
			t.Errorf("appendString(%s) = %q, %d; want %q", tc.in, got, n, tc.want)
		}
		// The limit cuts the text but not the count.
		got, n = appendString([]byte("xx"), []byte(tc.in), 4)
		if full := "xx" + tc.want; string(got) != full[:min(4, len(full))] || n != len(tc.want) {
			t.Errorf("limited appendString(%s) = %q, %d", tc.in, got, n)
		}
	}
}

func TestCompletionText(t *testing.T) {
	tests := []struct {
		ep     Endpoint
		answer string
		want   string
	}{
		{Chat, `{"choices":[{"message":{"content":"a"}},{"message":{"content":"b"}}]}`, "ab"},
		{Messages, `{"content":[{"type":"text","text":"a"},{"type":"tool_use"}]}`, "a"},
		{Responses, `{"output":[{"type":"reasoning","summary":[]},{"type":"message","content":[{"type":"output_text","text":"a"},{"type":"output_text","text":"b"}]},{"type":"message","content":[{"type":"output_text","text":"c"}]}]}`, "abc"},
	}
	for _, tc := range tests {
		var got string
		CompletionText(tc.ep, []byte(tc.answer), func(text []byte) { got += string(text) })
		if got != tc.want {
			t.Errorf("%v: %q, want %q", tc.ep, got, tc.want)
		}
	}
}

// TestUsageFromJSONAgreesWithDecoder checks the usage read without a walk
// (lastMember) against encoding/json on random answers: usage first, last,
// twice, nested, inside strings, spaced. The decoder keeps a key's last
// value, as UsageFromJSON does.
func TestUsageFromJSONAgreesWithDecoder(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	ws := func(b []byte) []byte {
		for range rng.IntN(3) {
			b = append(b, " \t\n\r"[rng.IntN(4)])
		}
		return b
	}
	usage := func(b []byte) []byte {
		return fmt.Appendf(b, `{"prompt_tokens":%d,"completion_tokens":%d}`, rng.IntN(1000), rng.IntN(1000))
	}
	decoys := []string{`x"usage":{"prompt_tokens":7}}`, `\"usage\":`, `"usage"`, `}`, `\\`}
	var value func(b []byte, depth int) []byte
	object := func(b []byte, depth int, top bool) []byte {
		b = append(ws(b), '{')
		n := rng.IntN(5)
		for m := range n {
			if m > 0 {
				b = append(ws(b), ',')
			}
			key := []string{`"id"`, `"choices"`, `"usage"`, `"model"`, `"usage"`, `"x\"usage"`, `"us\u0061ge"`}[rng.IntN(7)]
			b = append(ws(b), key...)
			b = append(ws(b), ':')
			b = ws(b)
			if strings.Contains(key, "usage") || strings.Contains(key, "u0061") && (top || rng.IntN(2) == 0) && rng.IntN(5) > 0 {
				b = usage(b)
			} else {
				b = value(b, depth+1)
			}
		}
		return append(ws(b), '}')
	}
	value = func(b []byte, depth int) []byte {
		switch k := rng.IntN(6); {
		case depth < 3 && k == 0:
			return object(b, depth, false)
		case depth < 3 && k == 1:
			b = append(b, '[')
			for e := range rng.IntN(3) {
				if e > 0 {
					b = append(b, ',')
				}
				b = value(ws(b), depth+1)
			}
			return append(b, ']')
		case k == 2:
			s, _ := json.Marshal(decoys[rng.IntN(len(decoys))])
			return append(b, s...)
		case k == 3:
			return append(b, "null"...)
		default:
			return strconv.AppendInt(b, int64(rng.IntN(100)), 10)
		}
	}
	for range 20000 {
		body := ws(object(nil, 0, true))
		var top map[string]json.RawMessage
		if err := json.Unmarshal(body, &top); err != nil {
			t.Fatalf("generated invalid JSON %q: %v", body, err)
		}
		var want Usage
		if v, ok := top["usage"]; ok {
			want, _ = openAIUsage(v)
		}
		if got := UsageFromJSON(OpenAI, body); got != want {
			t.Fatalf("%s\ngot %+v, want %+v", body, got, want)
		}
		// Cut or garbled (a provider's answer is not validated): no
		// panic, no read out of bounds.
		UsageFromJSON(OpenAI, body[:rng.IntN(len(body))])
		UsageFromJSON(Anthropic, body[rng.IntN(len(body)):])
		body[rng.IntN(len(body))] = `{}[]",:\ x`[rng.IntN(10)]
		UsageFromJSON(OpenAI, body)
	}
}
