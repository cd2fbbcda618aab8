package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestParseKind(t *testing.T) {
	for in, want := range map[string]Kind{"openai": OpenAI, " OpenAI ": OpenAI, "anthropic": Anthropic, "ANTHROPIC": Anthropic} {
		got, err := ParseKind(in)
		if err != nil || got != want {
			t.Errorf("ParseKind(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "azure", "open ai"} {
		if _, err := ParseKind(in); err == nil {
			t.Errorf("ParseKind(%q): no error", in)
		}
	}
	if OpenAI.String() != "openai" || Anthropic.String() != "anthropic" {
		t.Error("Kind.String")
	}
}

func TestEndpointFor(t *testing.T) {
	for path, want := range map[string]Endpoint{
		"/v1/chat/completions": Chat, "/v1/completions": Completions,
		"/v1/embeddings": Embeddings, "/v1/messages": Messages, "/v1/responses": Responses,
	} {
		got, ok := EndpointFor([]byte(path))
		if !ok || got != want || got.Path() != path {
			t.Errorf("EndpointFor(%q) = %v, %v", path, got, ok)
		}
	}
	for _, path := range []string{"", "/", "/v1/chat/completions/", "/v2/messages", "/v1/messages?x=1", "/V1/messages"} {
		if _, ok := EndpointFor([]byte(path)); ok {
			t.Errorf("EndpointFor(%q) matched", path)
		}
	}
	if Messages.Kind() != Anthropic || Chat.Kind() != OpenAI || Embeddings.Kind() != OpenAI {
		t.Error("Endpoint.Kind")
	}
	if a := testing.AllocsPerRun(100, func() { EndpointFor([]byte("/v1/chat/completions")) }); a != 0 {
		t.Errorf("EndpointFor allocates %v", a)
	}
}

func TestParseRequestValid(t *testing.T) {
	tests := []struct {
		name string
		ep   Endpoint
		body string
		want Request
	}{
		{
			name: "responses string input",
			ep:   Responses,
			body: `{"model":"gpt-4o","input":"hi there","instructions":"be brief","max_output_tokens":64,"stream":true}`,
			want: Request{Model: "gpt-4o", Stream: true, MaxTokens: 64, Texts: []string{"be brief", "hi there"}, Messages: 1, Choices: 1, Generates: true},
		},
		{
			name: "responses without input (a stored prompt)",
			ep:   Responses,
			body: `{"model":"gpt-4o","prompt":{"id":"pmpt_1"},"previous_response_id":"resp_1"}`,
			want: Request{Model: "gpt-4o", Choices: 1, Generates: true},
		},
		{
			name: "responses items",
			ep:   Responses,
			body: `{"model":"gpt-4o","input":[{"role":"user","content":"what is"},
				{"type":"message","role":"user","content":[{"type":"input_text","text":"this?"},{"type":"input_image","image_url":"data:x"}]},
				{"type":"function_call_output","call_id":"c1","output":"a cat"},
				{"type":"function_call","call_id":"c1","name":"look","arguments":"{\"q\":1}"}],
				"tools":[{"type":"function","name":"look"}]}`,
			want: Request{Model: "gpt-4o", Texts: []string{"what is", "this?", "a cat", `{"q":1}`, `[{"type":"function","name":"look"}]`},
				Messages: 4, Media: 1, Choices: 1, Generates: true},
		},
		{
			name: "chat minimal",
			ep:   Chat,
			body: `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
			want: Request{Model: "gpt-4o", Texts: []string{"hi"}, Messages: 1, Choices: 1, Generates: true},
		},
		{
			name: "chat full",
			ep:   Chat,
			body: `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"max_tokens":50,"max_completion_tokens":100,"n":3,
				"messages":[{"role":"system","content":"be brief"},
				{"role":"user","content":[{"type":"text","text":"what is"},{"type":"image_url","image_url":{"url":"data:x"}},{"type":"text","text":"this?"}]},
				{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"look","arguments":"{\"q\":1}"}}]},
				{"role":"tool","tool_call_id":"c1","content":"a cat"}],
				"tools":[{"type":"function","function":{"name":"look"}}]}`,
			want: Request{Model: "gpt-4o-mini", Stream: true, MaxTokens: 100, Choices: 3, ClientWantsUsage: true,
				Texts:    []string{"be brief", "what is", "this?", "look", `{"q":1}`, "a cat", `[{"type":"function","function":{"name":"look"}}]`},
				Messages: 4, Media: 1, Generates: true},
		},
		{
			name: "chat max_tokens only, nulls ignored, escapes decoded",
			ep:   Chat,
			body: `{"model":"m","stream":null,"max_completion_tokens":null,"max_tokens":7,"stream_options":null,"messages":[{"role":"user","content":"a\nb \u00e9"}]}`,
			want: Request{Model: "m", MaxTokens: 7, Choices: 1, Texts: []string{"a\nb é"}, Messages: 1, Generates: true},
		},
		{
			name: "chat include_usage false, stream false",
			ep:   Chat,
			body: `{"model":"m","stream":false,"stream_options":{"include_usage":false},"messages":[{"role":"user","content":""}]}`,
			want: Request{Model: "m", Choices: 1, Texts: []string{}, Messages: 1, Generates: true},
		},
		{
			name: "completions prompt string, best_of",
			ep:   Completions,
			body: `{"model":"gpt-3.5-turbo-instruct","prompt":"Say this","max_tokens":16,"n":2,"best_of":4,"stream":true}`,
			want: Request{Model: "gpt-3.5-turbo-instruct", Stream: true, MaxTokens: 16, Choices: 4, Texts: []string{"Say this"}, Generates: true},
		},
		{
			name: "completions token arrays",
			ep:   Completions,
			body: `{"model":"m","prompt":[[1,2,3],[4]]}`,
			want: Request{Model: "m", Choices: 1, TokenInputs: 4, Generates: true},
		},
		{
			name: "completions no prompt",
			ep:   Completions,
			body: `{"model":"m"}`,
			want: Request{Model: "m", Choices: 1, Generates: true},
		},
		{
			name: "embeddings string array",
			ep:   Embeddings,
			body: `{"model":"text-embedding-3-small","input":["one","two"],"max_tokens":"ignored"}`,
			want: Request{Model: "text-embedding-3-small", Texts: []string{"one", "two"}},
		},
		{
			name: "embeddings tokens",
			ep:   Embeddings,
			body: `{"model":"e","input":[5,6,7]}`,
			want: Request{Model: "e", TokenInputs: 3},
		},
		{
			name: "messages",
			ep:   Messages,
			body: `{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,"system":"You are terse.",
				"messages":[{"role":"user","content":"Hello"},
				{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"sig"},{"type":"text","text":"Hi"},{"type":"tool_use","id":"t","name":"f","input":{"a":1}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"42"}]},{"type":"tool_result","tool_use_id":"u","content":"43"}]}],
				"tools":[{"name":"f","input_schema":{"type":"object"}}]}`,
			want: Request{Model: "claude-sonnet-4-5", Stream: true, MaxTokens: 1024, Choices: 1,
				Texts:    []string{"Hello", "hmm", "Hi", `{"a":1}`, "42", "43", "You are terse.", `[{"name":"f","input_schema":{"type":"object"}}]`},
				Messages: 3, Generates: true},
		},
		{
			name: "messages system blocks, stream_options ignored",
			ep:   Messages,
			body: `{"model":"c","max_tokens":1,"stream_options":5,"n":"x","system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"q"}]}`,
			want: Request{Model: "c", MaxTokens: 1, Choices: 1, Texts: []string{"q", "sys"}, Messages: 1, Generates: true},
		},
		{
			name: "max bound and whitespace",
			ep:   Messages,
			body: " \n{ \"model\" : \"c\" , \"max_tokens\" : 10000000 , \"messages\" : [ { \"role\":\"user\",\"content\":\"q\" } ] }\n",
			want: Request{Model: "c", MaxTokens: 10_000_000, Choices: 1, Texts: []string{"q"}, Messages: 1, Generates: true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRequest(tc.ep, []byte(tc.body))
			if err != nil {
				t.Fatalf("ParseRequest: %v", err)
			}
			tc.want.Endpoint = tc.ep
			if len(got.Texts) == 0 && len(tc.want.Texts) == 0 {
				got.Texts, tc.want.Texts = nil, nil
			}
			// Whether stream_options is there only tells PrepareBody how
			// to merge (TestPrepareBody).
			got.streamOptions = false
			got.Uncounted = 0 // TestParseRequestUncounted
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseRequestInvalid(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		ep    Endpoint
		body  string
		code  string
		param string
	}{
		{Responses, `{"model":"m","input":5}`, "invalid_type", "input"},
		{Responses, `{"model":"m","input":["x"]}`, "invalid_type", "input[0]"},
		{Responses, `{"model":"m","input":"x","instructions":["y"]}`, "invalid_type", "instructions"},
		{Responses, `{"model":"m","input":"x","max_output_tokens":0}`, "integer_below_min_value", "max_output_tokens"},
		{Responses, `{"model":"m","input":"x","input":"y"}`, "duplicate_parameter", "input"},
		{Responses, `{"model":"m","input":"x","background":true}`, "unsupported_parameter", "background"},
		{Responses, `{"model":"m","input":"x","background":true,"background":false}`, "duplicate_parameter", "background"},
		{Chat, ``, "invalid_json", ""},
		{Chat, `{`, "invalid_json", ""},
		{Chat, `{"model":"m",}`, "invalid_json", ""},
		{Chat, `{"model":"m"} x`, "invalid_json", ""},
		{Chat, strings.Repeat("[", 300) + strings.Repeat("]", 300), "invalid_json", ""},
		{Chat, `[]`, "invalid_type", ""},
		{Chat, `"str"`, "invalid_type", ""},
		{Chat, `null`, "invalid_type", ""},
		{Chat, `{` + msgs + `}`, "missing_required_parameter", "model"},
		{Chat, `{"model":null,` + msgs + `}`, "missing_required_parameter", "model"},
		{Chat, `{"model":"",` + msgs + `}`, "invalid_type", "model"},
		{Chat, `{"model":5,` + msgs + `}`, "invalid_type", "model"},
		{Chat, `{"model":["m"],` + msgs + `}`, "invalid_type", "model"},
		{Chat, `{"model":"m","model":"n",` + msgs + `}`, "duplicate_parameter", "model"},
		{Chat, `{"model":"m","stream":"true",` + msgs + `}`, "invalid_type", "stream"},
		{Chat, `{"model":"m","stream":1,` + msgs + `}`, "invalid_type", "stream"},
		{Chat, `{"model":"m","max_tokens":0,` + msgs + `}`, "integer_below_min_value", "max_tokens"},
		{Chat, `{"model":"m","max_tokens":-5,` + msgs + `}`, "integer_below_min_value", "max_tokens"},
		{Chat, `{"model":"m","max_tokens":1.5,` + msgs + `}`, "invalid_type", "max_tokens"},
		{Chat, `{"model":"m","max_tokens":1.0,` + msgs + `}`, "invalid_type", "max_tokens"},
		{Chat, `{"model":"m","max_tokens":1e3,` + msgs + `}`, "invalid_type", "max_tokens"},
		{Chat, `{"model":"m","max_tokens":"100",` + msgs + `}`, "invalid_type", "max_tokens"},
		{Chat, `{"model":"m","max_tokens":10000001,` + msgs + `}`, "integer_above_max_value", "max_tokens"},
		{Chat, `{"model":"m","max_tokens":99999999999999999999999999,` + msgs + `}`, "integer_above_max_value", "max_tokens"},
		{Chat, `{"model":"m","max_tokens":10,"max_tokens":1000000,` + msgs + `}`, "duplicate_parameter", "max_tokens"},
		{Chat, `{"model":"m","max_completion_tokens":0,` + msgs + `}`, "integer_below_min_value", "max_completion_tokens"},
		{Chat, `{"model":"m","max_completion_tokens":true,` + msgs + `}`, "invalid_type", "max_completion_tokens"},
		{Chat, `{"model":"m","n":0,` + msgs + `}`, "integer_below_min_value", "n"},
		{Chat, `{"model":"m","n":1000,` + msgs + `}`, "integer_above_max_value", "n"},
		{Chat, `{"model":"m","stream":true,"stream_options":true,` + msgs + `}`, "invalid_type", "stream_options"},
		{Chat, `{"model":"m","stream":true,"stream_options":{"include_usage":"yes"},` + msgs + `}`, "invalid_type", "stream_options.include_usage"},
		{Chat, `{"model":"m","stream":true,"stream_options":{"include_usage":true,"include_usage":false},` + msgs + `}`, "duplicate_parameter", "stream_options.include_usage"},
		{Chat, `{"model":"m","stream_options":{},"stream_options":{},` + msgs + `}`, "duplicate_parameter", "stream_options"},
		{Chat, `{"model":"m"}`, "missing_required_parameter", "messages"},
		{Chat, `{"model":"m","messages":null}`, "missing_required_parameter", "messages"},
		{Chat, `{"model":"m","messages":"hi"}`, "invalid_type", "messages"},
		{Chat, `{"model":"m","messages":{"role":"user"}}`, "invalid_type", "messages"},
		{Chat, `{"model":"m","messages":[]}`, "invalid_value", "messages"},
		{Chat, `{"model":"m","messages":[{"role":"user","content":"a"},"b"]}`, "invalid_type", "messages[1]"},
		{Completions, `{"model":"m","prompt":5}`, "invalid_type", "prompt"},
		{Completions, `{"model":"m","prompt":{"a":1}}`, "invalid_type", "prompt"},
		{Completions, `{"model":"m","prompt":["a",{}]}`, "invalid_type", "prompt"},
		{Completions, `{"model":"m","prompt":[[1,"x"]]}`, "invalid_type", "prompt"},
		{Completions, `{"model":"m","prompt":"p","best_of":0}`, "integer_below_min_value", "best_of"},
		{Completions, `{"model":"m","prompt":"p","max_tokens":-1}`, "integer_below_min_value", "max_tokens"},
		{Embeddings, `{"model":"m"}`, "missing_required_parameter", "input"},
		{Embeddings, `{"model":"m","input":null}`, "missing_required_parameter", "input"},
		{Embeddings, `{"model":"m","input":true}`, "invalid_type", "input"},
		{Embeddings, `{"input":"x"}`, "missing_required_parameter", "model"},
		{Messages, `{"model":"c",` + msgs + `}`, "missing_required_parameter", "max_tokens"},
		{Messages, `{"model":"c","max_tokens":null,` + msgs + `}`, "missing_required_parameter", "max_tokens"},
		{Messages, `{"model":"c","max_tokens":0,` + msgs + `}`, "integer_below_min_value", "max_tokens"},
		{Messages, `{"model":"c","max_tokens":"1024",` + msgs + `}`, "invalid_type", "max_tokens"},
		{Messages, `{"model":"c","max_tokens":1024}`, "missing_required_parameter", "messages"},
		{Messages, `{"model":"c","max_tokens":1024,"messages":5}`, "invalid_type", "messages"},
		{Messages, `{"model":"c","max_tokens":1024,"system":5,` + msgs + `}`, "invalid_type", "system"},
		{Messages, `{"model":"c","max_tokens":1024,"system":{},` + msgs + `}`, "invalid_type", "system"},
		// JSON text is UTF-8: invalid bytes inside a string are refused.
		{Chat, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"caf\xe9\"}]}", "invalid_json", ""},
		{Chat, "{\"model\":\"m\xff\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "invalid_json", ""},
		{Chat, "{\"model\":\"m\",\"user\":\"\xed\xa0\x80\"," + msgs + "}", "invalid_json", ""},                    // an encoded surrogate
		{Chat, "{\"model\":\"m\",\"user\":\"\xc0\xaf\"," + msgs + "}", "invalid_json", ""},                        // overlong "/"
		{Messages, "{\"model\":\"c\",\"max_tokens\":1,\"system\":\"\xe2\x82\"," + msgs + "}", "invalid_json", ""}, // truncated
		{Embeddings, "{\"model\":\"m\",\"input\":[\"ok\",\"\x80\"]}", "invalid_json", ""},
	}
	for _, tc := range tests {
		t.Run(tc.ep.String()+" "+tc.body, func(t *testing.T) {
			_, err := ParseRequest(tc.ep, []byte(tc.body))
			var ce *ClientError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a *ClientError", err)
			}
			if ce.Status != 400 || ce.Code != tc.code || ce.Param != tc.param || ce.Message == "" {
				t.Errorf("got %+v, want status 400 code %q param %q", *ce, tc.code, tc.param)
			}
			for _, k := range []Kind{OpenAI, Anthropic} {
				if b := ce.Body(k); !json.Valid(b) {
					t.Errorf("Body(%v) is not JSON: %s", k, b)
				}
			}
		})
	}
	if _, err := ParseRequest(0, []byte(`{}`)); err == nil {
		t.Error("invalid endpoint accepted")
	} else if ce := (*ClientError)(nil); errors.As(err, &ce) {
		t.Error("invalid endpoint is a programming error, not a ClientError")
	}
}

func TestParseRequestUTF8(t *testing.T) {
	ok := `{"model":"m","messages":[{"role":"user","content":"café 速率 😀 \u00e9"}]}`
	if r, err := ParseRequest(Chat, []byte(ok)); err != nil || r.Texts[0] != "café 速率 😀 é" {
		t.Fatalf("valid UTF-8 refused or misread: %+v %v", r, err)
	}
	bad := []byte(`{"model":"m","messages":[{"role":"user","content":"caf` + "\xe9" + ` au lait"}]}`)
	_, err := ParseRequest(Chat, bad)
	var ce *ClientError
	if !errors.As(err, &ce) || ce.Code != "invalid_json" || !strings.Contains(ce.Message, "UTF-8") ||
		!strings.Contains(ce.Message, "offset 54") {
		t.Fatalf("got %v, want invalid_json naming UTF-8 and offset 54", err)
	}
	for _, tc := range []struct {
		in   string
		want int
	}{{"", -1}, {"abc", -1}, {"é😀", -1}, {"a\xff", 1}, {"é\xe2\x82", 2}, {"\xed\xa0\x80", 0}} {
		if got := invalidUTF8At([]byte(tc.in)); got != tc.want {
			t.Errorf("invalidUTF8At(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestParseRequestDoesNotAliasBody(t *testing.T) {
	body := []byte(`{"model":"gpt","messages":[{"role":"user","content":"hello"}]}`)
	r, err := ParseRequest(Chat, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := range body {
		body[i] = 'x'
	}
	if r.Model != "gpt" || r.Texts[0] != "hello" {
		t.Errorf("request changed with the body: %+v", r)
	}
}

func TestPrepareBody(t *testing.T) {
	tests := []struct {
		name, ep, body, want string
	}{
		{"no stream_options", "/v1/chat/completions",
			`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`},
		{"stream_options with other fields", "/v1/chat/completions",
			`{"model":"m","stream":true,"stream_options":{"include_obfuscation":false},"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"m","stream":true,"stream_options":{"include_obfuscation":false,"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`},
		{"include_usage false", "/v1/chat/completions",
			`{"model":"m", "stream": true, "stream_options": {"include_usage": false}, "messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"m", "stream": true, "stream_options": {"include_usage": true}, "messages":[{"role":"user","content":"hi"}]}`},
		{"stream_options null", "/v1/chat/completions",
			`{"model":"m","stream":true,"stream_options":null,"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`},
		{"whitespace around the closing brace", "/v1/completions",
			"{\"model\":\"m\",\"prompt\":\"p}\",\"stream\":true\n}\r\n ",
			"{\"model\":\"m\",\"prompt\":\"p}\",\"stream\":true\n,\"stream_options\":{\"include_usage\":true}}\r\n "},
		{"completions", "/v1/completions",
			`{"model":"m","prompt":"p","stream":true}`,
			`{"model":"m","prompt":"p","stream":true,"stream_options":{"include_usage":true}}`},
		{"already on", "/v1/chat/completions",
			`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, ""},
		{"not streamed", "/v1/chat/completions",
			`{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`, ""},
		{"embeddings", "/v1/embeddings", `{"model":"m","input":"x","stream":true}`, ""},
		{"anthropic", "/v1/messages",
			`{"model":"c","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ep, _ := EndpointFor([]byte(tc.ep))
			body := []byte(tc.body)
			r, err := ParseRequest(ep, body)
			if err != nil {
				t.Fatal(err)
			}
			got, err := PrepareBody(r, body)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" { // untouched: the very same slice
				if &got[0] != &body[0] || len(got) != len(body) {
					t.Errorf("body was copied or changed: %s", got)
				}
				return
			}
			if string(got) != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			if string(body) != tc.body {
				t.Errorf("input body modified: %s", body)
			}
			// The provider now reports usage, and the body still parses.
			r2, err := ParseRequest(ep, got)
			if err != nil || !r2.ClientWantsUsage || !gjson.GetBytes(got, "stream_options.include_usage").Bool() {
				t.Errorf("prepared body: %+v %v", r2, err)
			}
		})
	}
}

func TestErrorBody(t *testing.T) {
	msg := "bad \"value\"\n\t\\ <é> \x01 \xff \u2028 end"
	b := ErrorBody(msg, "invalid_request_error", "invalid_value", "messages[0].content")
	var v struct {
		Error struct {
			Message, Type string
			Param, Code   *string
		}
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	want := strings.Replace(msg, "\xff", "\ufffd", 1)
	if v.Error.Message != want || v.Error.Type != "invalid_request_error" ||
		v.Error.Param == nil || *v.Error.Param != "messages[0].content" || *v.Error.Code != "invalid_value" {
		t.Errorf("decoded %+v from %s", v, b)
	}
	if bytes.Contains(b, []byte("\u2028")) {
		t.Error("U+2028 not escaped")
	}
	b = ErrorBody("m", "t", "", "")
	if string(b) != `{"error":{"message":"m","type":"t","param":null,"code":null}}` {
		t.Errorf("got %s", b)
	}
	ce := &ClientError{Status: 400, Code: "invalid_json", Message: "malformed JSON body"}
	if got := string(ce.Body(Anthropic)); got != `{"type":"error","error":{"type":"invalid_request_error","message":"malformed JSON body"}}` {
		t.Errorf("anthropic body %s", got)
	}
	if got := string(ce.Body(OpenAI)); got != `{"error":{"message":"malformed JSON body","type":"invalid_request_error","param":null,"code":"invalid_json"}}` {
		t.Errorf("openai body %s", got)
	}
	if ce.Error() == "" {
		t.Error("empty Error()")
	}
}

// Text the parser once missed (found by a reviewer), and media it did not
// count: an Anthropic document whose source is plain text or content
// blocks (its text read, not a media part), a search_result's content in a
// tool_result (two levels down), and a Responses function call's output
// given as content parts (its images are media).
func TestParseRequestNestedTextAndMedia(t *testing.T) {
	cases := []struct {
		name  string
		ep    Endpoint
		body  string
		texts []string
		media int
	}{
		{"anthropic text document", Messages,
			`{"model":"c","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"the doc"}},{"type":"text","text":"sum up"}]}]}`,
			[]string{"the doc", "sum up"}, 0},
		{"anthropic content document", Messages,
			`{"model":"c","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"content","content":[{"type":"text","text":"part one"}]}}]}]}`,
			[]string{"part one"}, 0},
		{"anthropic pdf document", Messages,
			`{"model":"c","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0="}}]}]}`,
			nil, 1},
		{"search_result in a tool_result", Messages,
			`{"model":"c","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"search_result","source":"https://x","title":"T","content":[{"type":"text","text":"found it"}]}]}]}]}`,
			[]string{"T", "found it"}, 0}, // its title is read too
		{"responses output parts", Responses,
			`{"model":"gpt-4o","input":[{"type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":"a screenshot"},{"type":"input_image","image_url":"data:x"}]}]}`,
			[]string{"a screenshot"}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseRequest(tc.ep, []byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Texts) == 0 {
				r.Texts = nil
			}
			if !reflect.DeepEqual(r.Texts, tc.texts) || r.Media != tc.media {
				t.Errorf("texts %q, media %d; want %q, %d", r.Texts, r.Media, tc.texts, tc.media)
			}
		})
	}
}

// Uncounted is the body's bytes that are neither counted text nor media:
// JSON's syntax and parameters, and text in fields the parse does not
// read, so that the reservation covers them (a reviewer's: text in a field
// it missed reached the provider on a reservation of a few tokens).
func TestParseRequestUncounted(t *testing.T) {
	hidden := strings.Repeat("apple ", 1000)
	for _, tc := range []struct {
		name     string
		ep       Endpoint
		body     string
		min, max int // bounds on Uncounted
	}{
		{"plain chat: syntax only", Chat, `{"model":"m","messages":[{"role":"user","content":"` + hidden + `"}]}`, 40, 60},
		{"an image's bytes are media", Chat, `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,` + hidden + `"}}]}]}`, 40, 60},
		{"token ids are counted", Completions, `{"model":"m","prompt":[[1,2,3],[4,5]]}`, 20, 30},
		{"a field the parse does not read", Chat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"x_note":"` + hidden + `"}`, 6000, 6100},
		{"a nested key given twice: the last uncounted", Chat,
			`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{}","arguments":"` + hidden + `"}}]}]}`, 6000, 6150},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseRequest(tc.ep, []byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if r.Uncounted < tc.min || r.Uncounted > tc.max {
				t.Errorf("Uncounted %d of a %d-byte body, want %d..%d", r.Uncounted, len(tc.body), tc.min, tc.max)
			}
		})
	}
}

// Text in the fields a reviewer found uncounted is counted.
func TestParseRequestCountsEveryPromptField(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		ep         Endpoint
	}{
		{"an assistant's refusal part", `{"model":"m","messages":[{"role":"assistant","content":[{"type":"refusal","refusal":"SECRET"}]}]}`, Chat},
		{"a deprecated function_call", `{"model":"m","messages":[{"role":"assistant","function_call":{"name":"f","arguments":"SECRET"}}]}`, Chat},
		{"a completion's suffix", `{"model":"m","prompt":"a","suffix":"SECRET"}`, Completions},
		{"an Anthropic document's context", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"d"},"context":"SECRET"}]}]}`, Messages},
		{"an Anthropic document's title", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"d"},"title":"SECRET"}]}]}`, Messages},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseRequest(tc.ep, []byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(r.Texts, "SECRET") {
				t.Errorf("texts %q: the field's text is not counted", r.Texts)
			}
		})
	}
}
