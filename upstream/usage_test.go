package upstream

import "testing"

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
