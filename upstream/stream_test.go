package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// openAIChunk renders a chat.completion.chunk as OpenAI sends it; withNull
// adds the "usage":null that include_usage puts on every chunk.
func openAIChunk(delta, finish string, withNull bool) string {
	s := `data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_eb9dce56a8","choices":[{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":` + finish + `}]`
	if withNull {
		s += `,"usage":null`
	}
	return s + "}\n\n"
}

const openAIUsageChunk = `data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_eb9dce56a8","choices":[],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}` + "\n\n"

// openAIStream is a captured-style chat stream: what the provider sends
// with include_usage on (withUsage), or what it sends without it.
func openAIStream(withUsage bool) string {
	var b strings.Builder
	b.WriteString(openAIChunk(`{"role":"assistant","content":"","refusal":null}`, "null", withUsage))
	for _, tok := range []string{"Hello", "!", " How", " can", " I", ` \"help\"`, `\n`, ` you`, ` today\u00e9`, "?"} {
		b.WriteString(openAIChunk(`{"content":"`+tok+`"}`, "null", withUsage))
	}
	b.WriteString(openAIChunk(`{}`, `"stop"`, withUsage))
	if withUsage {
		b.WriteString(openAIUsageChunk)
	}
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

const openAIText = "Hello! How can I \"help\"\n you todayé?"

const anthropicStream = "event: message_start\n" +
	`data: {"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5-20250929","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":100,"cache_read_input_tokens":50,"output_tokens":1}}}` + "\n\n" +
	"event: content_block_start\n" +
	`data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
	"event: ping\n" +
	`data: {"type": "ping"}` + "\n\n" +
	": keep-alive comment\n\n" +
	"event: content_block_delta\n" +
	`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}` + "\n\n" +
	"event: content_block_delta\n" +
	`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"!\n\"World\" \u00e9"}}` + "\n\n" +
	"event: content_block_stop\n" +
	`data: {"type":"content_block_stop","index":0}` + "\n\n" +
	"event: content_block_start\n" +
	`data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{}}}` + "\n\n" +
	"event: content_block_delta\n" +
	`data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Paris\"}"}}` + "\n\n" +
	"event: content_block_stop\n" +
	`data: {"type":"content_block_stop","index":1}` + "\n\n" +
	"event: message_delta\n" +
	`data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}` + "\n\n" +
	"event: message_stop\n" +
	`data: {"type":"message_stop"}` + "\n\n"

const anthropicText = "Hello!\n\"World\" é{\"city\": \"Paris\"}"

// run feeds input to a fresh filter in the given chunk sizes (cycled) and
// returns the emitted events.
func run(t testing.TB, f *StreamFilter, input string, sizes []int) []string {
	t.Helper()
	var out []string
	emit := func(ev []byte) error { out = append(out, string(ev)); return nil }
	for i, k := 0, 0; i < len(input); k++ {
		n := min(sizes[k%len(sizes)], len(input)-i)
		if err := f.Write([]byte(input[i:i+n]), emit); err != nil {
			t.Fatal(err)
		}
		i += n
	}
	if err := f.Close(emit); err != nil {
		t.Fatal(err)
	}
	return out
}

// events splits a well-formed stream into its events.
func events(s string) []string {
	var out []string
	for s != "" {
		i := strings.Index(s, "\n\n")
		if j := strings.Index(s, "\n\r\n"); j >= 0 && (i < 0 || j < i) {
			out, s = append(out, s[:j+3]), s[j+3:]
			continue
		}
		if i < 0 {
			return append(out, s)
		}
		out, s = append(out, s[:i+2]), s[i+2:]
	}
	return out
}

type streamCase struct {
	name       string
	kind       Kind
	wantsUsage bool
	input      string
	want       []string
	usage      Usage
	text       string
}

func streamCases() []streamCase {
	crlf := func(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }
	return []streamCase{
		{"openai injected usage", OpenAI, false, openAIStream(true), events(openAIStream(false)), Usage{19, 10, true}, openAIText},
		{"openai client wants usage", OpenAI, true, openAIStream(true), events(openAIStream(true)), Usage{19, 10, true}, openAIText},
		{"openai no usage at all", OpenAI, false, openAIStream(false), events(openAIStream(false)), Usage{}, openAIText},
		{"openai crlf", OpenAI, false, crlf(openAIStream(true)), events(crlf(openAIStream(false))), Usage{19, 10, true}, openAIText},
		{"anthropic", Anthropic, false, anthropicStream, events(anthropicStream), Usage{175, 15, true}, anthropicText},
		{"anthropic crlf", Anthropic, false, crlf(anthropicStream), events(crlf(anthropicStream)), Usage{175, 15, true}, anthropicText},
	}
}

func TestStreamFilterSplits(t *testing.T) {
	for _, tc := range streamCases() {
		t.Run(tc.name, func(t *testing.T) {
			f := NewStreamFilter(tc.kind, tc.wantsUsage)
			check := func(how string, got []string) {
				t.Helper()
				if strings.Join(got, "") != strings.Join(tc.want, "") || len(got) != len(tc.want) {
					t.Fatalf("%s: emitted %d events:\n%q\nwant %d:\n%q", how, len(got), got, len(tc.want), tc.want)
				}
				if f.Usage() != tc.usage {
					t.Fatalf("%s: usage %+v, want %+v", how, f.Usage(), tc.usage)
				}
				if string(f.Text()) != tc.text || f.TextBytes() != len(tc.text) {
					t.Fatalf("%s: text %q (%d bytes), want %q", how, f.Text(), f.TextBytes(), tc.text)
				}
			}
			check("whole", run(t, f, tc.input, []int{len(tc.input)}))
			f.Reset(tc.kind, tc.wantsUsage)
			check("byte by byte", run(t, f, tc.input, []int{1}))
			for i := 0; i <= len(tc.input); i++ { // every split point
				f.Reset(tc.kind, tc.wantsUsage)
				check(fmt.Sprintf("split at %d", i), run(t, f, tc.input, []int{i, len(tc.input)}))
			}
			rng := rand.New(rand.NewPCG(1, uint64(len(tc.input))))
			for range 200 {
				sizes := make([]int, 1+rng.IntN(20))
				for j := range sizes {
					sizes[j] = 1 + rng.IntN(300)
				}
				f.Reset(tc.kind, tc.wantsUsage)
				check(fmt.Sprintf("chunks %v", sizes), run(t, f, tc.input, sizes))
			}
		})
	}
}

func TestStreamFilterUsageNull(t *testing.T) {
	tests := []struct{ in, want string }{
		{`data: {"a":1,"usage":null}`, `data: {"a":1}`},
		{`data: {"usage":null,"a":1}`, `data: {"a":1}`},
		{`data: {"usage":null}`, `data: {}`},
		{`data: { "a" : 1 , "usage" : null , "b" : [2] }`, `data: { "a" : 1 , "b" : [2] }`},
		{`data:{"choices":[{"delta":{"content":"\"usage\":null"}}],"usage":null}`, `data:{"choices":[{"delta":{"content":"\"usage\":null"}}]}`},
		{`data: {"choices":[{"usage":null}]}`, `data: {"choices":[{"usage":null}]}`}, // not top-level
		{`data: {"usage":{"prompt_tokens":1},"choices":[{"delta":{}}]}`, `data: {"usage":{"prompt_tokens":1},"choices":[{"delta":{}}]}`},
	}
	for _, tc := range tests {
		for _, wants := range []bool{false, true} {
			f := NewStreamFilter(OpenAI, wants)
			got := run(t, f, tc.in+"\n\n", []int{7})
			want := tc.want + "\n\n"
			if wants {
				want = tc.in + "\n\n"
			}
			if len(got) != 1 || got[0] != want {
				t.Errorf("wants=%v %s: got %q, want %q", wants, tc.in, got, want)
			}
		}
	}
}

func TestStreamFilterUsageChunk(t *testing.T) {
	usageOnly := "data: {\"id\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n"
	for _, wants := range []bool{false, true} {
		f := NewStreamFilter(OpenAI, wants)
		got := run(t, f, usageOnly+"data: [DONE]\n\n", []int{5})
		want := []string{usageOnly, "data: [DONE]\n\n"}
		if !wants {
			want = want[1:]
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("wants=%v: got %q", wants, got)
		}
		if f.Usage() != (Usage{3, 4, true}) {
			t.Errorf("usage %+v", f.Usage())
		}
	}
	// Completions streams report the same way; a usage chunk with choices is
	// forwarded (the provider sends it regardless of the option).
	f := NewStreamFilter(OpenAI, false)
	in := "data: {\"object\":\"text_completion\",\"choices\":[{\"text\":\"ab\",\"index\":0}],\"usage\":null}\n\n" +
		"data: {\"choices\":[{\"text\":\"c\",\"index\":0}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\n"
	got := run(t, f, in, []int{1000})
	if len(got) != 2 || got[0] != "data: {\"object\":\"text_completion\",\"choices\":[{\"text\":\"ab\",\"index\":0}]}\n\n" ||
		string(f.Text()) != "abc" || f.Usage() != (Usage{1, 2, true}) {
		t.Errorf("got %q text %q usage %+v", got, f.Text(), f.Usage())
	}
}

func TestStreamFilterOddEvents(t *testing.T) {
	in := ": ping\n\n" + // comment
		"\n\n" + // empty event
		"event: x\nid: 1\nretry: 5\ndata: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\n" + // data on two lines
		"data: \"usage\":null}\n\n" +
		"data: not json\n\n" +
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\"}}]}}],\"usage\":null}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"compl" // cut
	f := NewStreamFilter(OpenAI, false)
	got := run(t, f, in, []int{3})
	want := []string{": ping\n\n", "\n\n",
		"event: x\nid: 1\nretry: 5\ndata: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\ndata: \"usage\":null}\n\n",
		"data: not json\n\n",
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\"}}]}}]}\n\n",
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"compl",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
	if string(f.Text()) != "af{\"x" || f.Usage() != (Usage{}) {
		t.Errorf("text %q usage %+v", f.Text(), f.Usage())
	}

	// A complete chunk missing only its blank line is still an event.
	f.Reset(OpenAI, false)
	got = run(t, f, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":8}}\n", []int{100})
	if len(got) != 0 || f.Usage() != (Usage{9, 8, true}) {
		t.Errorf("trailing usage chunk: %q %+v", got, f.Usage())
	}
	f.Reset(OpenAI, true)
	got = run(t, f, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":8}}", []int{100})
	if len(got) != 1 || f.Usage() != (Usage{9, 8, true}) {
		t.Errorf("trailing usage chunk: %q %+v", got, f.Usage())
	}
}

func TestStreamFilterAnthropic(t *testing.T) {
	// Without event: lines, the data's type decides; message_delta may
	// carry input and cache counts, which replace the earlier ones.
	in := `data: {"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":1}}}` + "\n\n" +
		`data: {"delta":{"type":"thinking_delta","thinking":"hm"},"type":"content_block_delta"}` + "\n\n" +
		`data: {"type":"content_block_delta","delta":{"type":"signature_delta","signature":"abc"}}` + "\n\n" +
		`data: {"type":"message_delta","usage":{"output_tokens":7}}` + "\n\n" +
		`data: {"type":"message_delta","usage":{"input_tokens":12,"cache_read_input_tokens":null,"output_tokens":9}}` + "\n\n" +
		"event: message_delta\n" + `data: {"type":"message_delta","usage":{"output_tokens":"x"}}` + "\n\n" +
		"event: error\n" + `data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}` + "\n\n"
	f := NewStreamFilter(Anthropic, false)
	got := run(t, f, in, []int{1})
	if strings.Join(got, "") != in || len(got) != 7 {
		t.Errorf("got %q", got)
	}
	if f.Usage() != (Usage{17, 9, true}) || string(f.Text()) != "hm" {
		t.Errorf("usage %+v text %q", f.Usage(), f.Text())
	}
}

// A Responses stream: typed events forwarded untouched (no [DONE]), the
// text of the output deltas kept, the usage of response.completed; a
// stream cut before it has text and no usage.
func TestStreamFilterResponses(t *testing.T) {
	head := "event: response.created\n" + `data: {"type":"response.created","response":{"id":"r1","status":"in_progress","output":[]}}` + "\n\n" +
		"event: response.output_text.delta\n" + `data: {"type":"response.output_text.delta","item_id":"m1","output_index":0,"content_index":0,"delta":"Hel"}` + "\n\n" +
		`data: {"delta":"lo","type":"response.output_text.delta"}` + "\n\n" +
		"event: response.function_call_arguments.delta\n" + `data: {"type":"response.function_call_arguments.delta","delta":"{}"}` + "\n\n" +
		"event: response.output_text.done\n" + `data: {"type":"response.output_text.done","text":"Hello"}` + "\n\n"
	done := "event: response.completed\n" + `data: {"type":"response.completed","response":{"id":"r1","status":"completed","usage":{"input_tokens":11,"output_tokens":3,"total_tokens":14}}}` + "\n\n"
	f := NewResponsesFilter()
	got := run(t, f, head+done, []int{1, 7})
	if strings.Join(got, "") != head+done || len(got) != 6 {
		t.Errorf("forwarded %q", got)
	}
	if f.Usage() != (Usage{11, 3, true}) || string(f.Text()) != "Hello{}" {
		t.Errorf("usage %+v text %q", f.Usage(), f.Text())
	}
	cut := NewResponsesFilter()
	run(t, cut, head, []int{3})
	if cut.Usage().Reported || string(cut.Text()) != "Hello{}" {
		t.Errorf("cut stream: usage %+v text %q", cut.Usage(), cut.Text())
	}
}

func TestStreamFilterEmitError(t *testing.T) {
	gone := errors.New("client gone")
	in := []byte(openAIStream(true))
	f := NewStreamFilter(OpenAI, false)
	calls := 0
	err := f.Write(in, func([]byte) error {
		calls++
		if calls == 2 {
			return gone
		}
		return nil
	})
	if !errors.Is(err, gone) || calls != 2 {
		t.Fatalf("err %v after %d calls", err, calls)
	}
	// Close reports the error of the last emit too.
	f.Reset(OpenAI, false)
	_ = f.Write([]byte("data: {}\n\ndata: [DONE]"), func([]byte) error { return nil })
	if err := f.Close(func([]byte) error { return gone }); !errors.Is(err, gone) {
		t.Fatalf("Close: %v", err)
	}
}

func TestStreamFilterTextCap(t *testing.T) {
	f := NewStreamFilter(Anthropic, false)
	ev := []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" +
		strings.Repeat("x", 1000) + "\"}}\n\n")
	nop := func([]byte) error { return nil }
	for range 5000 {
		if err := f.Write(ev, nop); err != nil {
			t.Fatal(err)
		}
	}
	if len(f.Text()) != MaxStreamText || f.TextBytes() != 5000*1000 {
		t.Errorf("text %d bytes, counted %d", len(f.Text()), f.TextBytes())
	}
	f.Reset(OpenAI, false)
	if len(f.Text()) != 0 || f.TextBytes() != 0 || cap(f.text) != 0 {
		t.Errorf("Reset kept a big text buffer (cap %d)", cap(f.text))
	}
}

func TestStreamFilterOversizedEvent(t *testing.T) {
	// Not SSE at all: a huge body without blank lines is forwarded, not held.
	big := bytes.Repeat([]byte("0123456789abcdef"), maxPendingEvent/16+1000)
	in := string(big) + "\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\n"
	f := NewStreamFilter(OpenAI, false)
	got := run(t, f, in, []int{4096})
	joined := strings.Join(got, "")
	if !strings.HasPrefix(joined, string(big)+"\n\n") || len(joined) != len(big)+2 {
		t.Errorf("got %d bytes in %d events", len(joined), len(got))
	}
	if f.Usage() != (Usage{1, 2, true}) {
		t.Errorf("usage after oversized event: %+v", f.Usage())
	}
	if cap(f.buf) > 2*maxPendingEvent {
		t.Errorf("buffer grew to %d", cap(f.buf))
	}
}

func TestStreamFilterAllocs(t *testing.T) {
	for _, tc := range streamCases() {
		f := NewStreamFilter(tc.kind, tc.wantsUsage)
		in := []byte(tc.input)
		nop := func([]byte) error { return nil }
		run := func() {
			f.Reset(tc.kind, tc.wantsUsage)
			for i := 0; i < len(in); i += 97 {
				_ = f.Write(in[i:min(i+97, len(in))], nop)
			}
			_ = f.Close(nop)
		}
		run() // warm the buffers
		if a := testing.AllocsPerRun(50, run); a != 0 {
			t.Errorf("%s: %v allocations per stream", tc.name, a)
		}
	}
}

func TestLooksLikeSSE(t *testing.T) {
	for _, tc := range []struct {
		answer string
		sse    bool
	}{
		{"data: {\"a\":1}\n\n", true},
		{"data:{}\n\n", true},
		{"\r\n\r\nevent: message_start\ndata: {}\n\n", true},
		{"\xef\xbb\xbfdata: {}\n\n", true},
		{": keep-alive\n\n", true},
		{"id: 1\ndata: x\n\n", true},
		{"retry: 1000\n\n", true},
		{`{"choices":[{"message":{"content":"data: x"}}]}`, false},
		{"  \n[1,2]", false},
		{"", false},
		{"Internal Server Error", false},
		{"database: down", false},
	} {
		if got := LooksLikeSSE([]byte(tc.answer)); got != tc.sse {
			t.Errorf("LooksLikeSSE(%q) = %v, want %v", tc.answer, got, tc.sse)
		}
	}
}

// The event that ends a Responses stream is held whole past maxPendingEvent
// (it echoes the request, so it can be megabytes), for its usage; any
// other event that large is forwarded as it comes, unparsed. Either way
// the client gets the bytes as they came.
func TestStreamFilterLargeResponsesEvent(t *testing.T) {
	echo := strings.Repeat("instructions echoed ", 3*maxPendingEvent/20) // 3 MiB
	usage := `"usage":{"input_tokens":750000,"output_tokens":100002,"output_tokens_details":{"reasoning_tokens":100000}}`
	for _, tc := range []struct {
		name      string
		event     string
		held      bool // emitted whole, and its usage read
		responses bool
	}{{
		name:      "response.completed",
		event:     "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"instructions\":\"" + echo + "\"," + usage + "}}\n\n",
		held:      true,
		responses: true,
	}, {
		name:      "no event line",
		event:     "data: {\"type\":\"response.incomplete\",\"response\":{\"instructions\":\"" + echo + "\"," + usage + "}}\n\n",
		held:      true,
		responses: true,
	}, {
		name:      "a delta",
		event:     "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"" + echo + "\"}\n\n",
		responses: true,
	}, {
		name:  "chat completions",
		event: "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + echo + "\"}}]}\n\n",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewStreamFilter(OpenAI, true)
			if tc.responses {
				f = NewResponsesFilter()
			}
			got := run(t, f, tc.event, []int{16 << 10})
			if joined := strings.Join(got, ""); joined != tc.event {
				t.Fatalf("forwarded %d bytes, not the event's %d as they came", len(joined), len(tc.event))
			}
			if held := len(got) == 1; held != tc.held {
				t.Errorf("emitted in %d pieces, want held whole %v", len(got), tc.held)
			}
			if want := (Usage{Prompt: 750000, Completion: 100002, Reported: true}); tc.held && f.Usage() != want {
				t.Errorf("usage %+v, want %+v", f.Usage(), want)
			}
		})
	}
}

// An event that never ends is held no longer than its kind allows, and
// once cut (passed on as it comes) the rest of it is not held again: a
// Responses end event up to maxPendingEndEvent, anything else up to
// maxPendingEvent (a reviewer's: a cut end event was held again in 64 MiB
// batches, and any event without an event line was held).
func TestStreamFilterNeverEndingEvent(t *testing.T) {
	for _, tc := range []struct {
		name     string
		head     string
		mostHeld int
	}{
		{"untyped, not an end", `data: {"type":"response.in_progress","x":"`, 2 * maxPendingEvent},
		{"an end event", "event: response.completed\ndata: {\"type\":\"response.completed\",\"x\":\"", maxPendingEndEvent + 2*maxPendingEvent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewResponsesFilter()
			chunk := []byte(strings.Repeat("x", 16<<10))
			in, out := 0, 0
			emit := func(ev []byte) error { out += len(ev); return nil }
			write := func(b []byte) {
				if err := f.Write(b, emit); err != nil {
					t.Fatal(err)
				}
				in += len(b)
			}
			write([]byte(tc.head))
			mostHeld, heldAfterCut := 0, 0
			for in < maxPendingEndEvent+8*maxPendingEvent {
				write(chunk)
				mostHeld = max(mostHeld, in-out)
				if f.skipping {
					heldAfterCut = max(heldAfterCut, in-out)
				}
			}
			if mostHeld > tc.mostHeld || heldAfterCut > 2*maxPendingEvent {
				t.Errorf("held at most %d MiB (want ≤ %d), %d MiB once cut", mostHeld>>20, tc.mostHeld>>20, heldAfterCut>>20)
			}
		})
	}
}

// A stream may begin with a byte-order mark: the first event is read past
// it (its usage and text were not), and it is not passed on; the split
// of the mark over writes changes nothing.
func TestStreamFilterByteOrderMark(t *testing.T) {
	const event = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hello there\"}}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3,\"total_tokens\":8}}\n\ndata: [DONE]\n\n"
	f := NewStreamFilter(OpenAI, true)
	got := strings.Join(run(t, f, "\xef\xbb\xbf"+event, []int{1, 2, 4096}), "")
	if got != event {
		t.Errorf("passed on %q, want %q", got, event)
	}
	if f.Usage() != (Usage{Prompt: 5, Completion: 3, Reported: true}) || string(f.Text()) != "hello there" {
		t.Errorf("usage %+v, text %q: the first event, after the mark, was not read", f.Usage(), f.Text())
	}
	// Anywhere else the mark is a field name's first character, which the
	// client ignores: passed on as it came (a reviewer's).
	const later = "data: {\"a\":1}\n\n\xef\xbb\xbfdata: {\"b\":2}\n\n"
	if got := strings.Join(run(t, NewStreamFilter(OpenAI, true), later, []int{4096}), ""); got != later {
		t.Errorf("a mark before a later event: passed on %q, want %q", got, later)
	}
}

// Random Responses streams (a leading byte-order mark, small events, events
// past 1 MiB with and without an end type, CRLF or LF, no final blank
// line), written in random pieces: the client gets the bytes sent, less a
// leading mark, and an end event's usage is read (a reviewer's; it found
// a first event past 1 MiB unread after a mark).
func TestStreamFilterRandomResponsesStreams(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	big := strings.Repeat("y", 1<<20+100)
	rounds := 100
	if testing.Short() {
		rounds = 20
	}
	for round := range rounds {
		var in strings.Builder
		nl := "\n"
		if rng.IntN(2) == 0 {
			nl = "\r\n"
		}
		bom := rng.IntN(3) == 0
		if bom {
			in.WriteString("\xef\xbb\xbf")
		}
		wantUsage := false
		for i := range 1 + rng.IntN(6) {
			switch rng.IntN(5) {
			case 0:
				fmt.Fprintf(&in, "event: response.output_text.delta%sdata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi %d\"}%s%s", nl, i, nl, nl)
			case 1:
				fmt.Fprintf(&in, "event: response.output_item.done%sdata: {\"type\":\"response.output_item.done\",\"item\":\"%s\"}%s%s", nl, big, nl, nl)
			case 2:
				fmt.Fprintf(&in, "data: {\"type\":\"response.completed\",\"response\":{\"instructions\":\"%s\",\"usage\":{\"input_tokens\":7,\"output_tokens\":9,\"total_tokens\":16}}}%s%s", big, nl, nl)
				wantUsage = true
			case 3:
				fmt.Fprintf(&in, ": comment %d%s%s", i, nl, nl)
			case 4:
				fmt.Fprintf(&in, "event: response.completed%sdata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":7,\"output_tokens\":9,\"total_tokens\":16},\"x\":\"%s\"}}%s%s", nl, big[:rng.IntN(len(big))], nl, nl)
				wantUsage = true
			}
		}
		src := in.String()
		if rng.IntN(4) == 0 {
			src = strings.TrimSuffix(src, nl) // no final blank line
		}
		f := NewResponsesFilter()
		var out []byte
		emit := func(ev []byte) error { out = append(out, ev...); return nil }
		for rest := src; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(40<<10))
			if err := f.Write([]byte(rest[:n]), emit); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		_ = f.Close(emit)
		want := strings.TrimPrefix(src, "\xef\xbb\xbf")
		if string(out) != want {
			t.Fatalf("round %d: %d bytes out, %d sent (bom %v)", round, len(out), len(want), bom)
		}
		if wantUsage && !f.Usage().Reported {
			t.Errorf("round %d: usage not read (bom %v, starts %q)", round, bom, src[:min(len(src), 60)])
		}
	}
}
