package upstream

import (
	"bytes"
)

const (
	// MaxStreamText caps the completion text a StreamFilter keeps for
	// counting tokens when the provider reports no usage. Past it the filter
	// only counts bytes (TextBytes), for the caller to extrapolate.
	MaxStreamText = 4 << 20
	// maxPendingEvent bounds the bytes held while waiting for the end of an
	// event. An upstream that never ends its event (not SSE at all, or
	// broken) has the excess forwarded untouched instead of held in memory.
	maxPendingEvent = 1 << 20
	// maxPendingEndEvent is the bound for the event that ends a Responses
	// stream (response.completed), which carries its usage: it echoes the
	// request's instructions and tools and the whole output, so it can be
	// as large as the request the node took (max_body_bytes) and more. As
	// large as a JSON answer read whole may be.
	maxPendingEndEvent = DefaultMaxAnswerBytes
	// A pooled filter keeps buffers up to this size across Reset.
	keepBuffer = 64 << 10
)

// StreamFilter sits between a provider's SSE stream and the client. It
// splits the raw bytes into events, forwards them, and records the usage and
// the completion text on the way.
//
// Events are forwarded byte for byte (but for a byte-order mark the stream
// begins with), with one exception: for OpenAI, when
// the gateway turned stream_options.include_usage on for a client that did
// not ask for it (clientWantsUsage false), the filter removes what that
// option added, so the client sees exactly what the provider would have
// sent it: the final usage-only chunk ("choices":[] and a usage object) is
// dropped, and the "usage":null member of every other chunk is cut.
//
// A StreamFilter is not safe for concurrent use. It keeps its buffers across
// Reset, so it can be pooled.
type StreamFilter struct {
	kind       Kind
	responses  bool // an OpenAI Responses API stream (typed events, usage in response.completed)
	wantsUsage bool
	skipping   bool // an oversized event is being forwarded raw
	began      bool // the stream's first bytes were looked at for a byte-order mark
	large      int  // largeUnknown, largeHeld or largeSkipped: the pending event past maxPendingEvent

	buf  []byte // bytes received and not yet emitted
	scan int    // where in buf the search for an event end resumes
	out  []byte // scratch: a rewritten event
	join []byte // scratch: the data lines of an event that has several

	text      []byte
	textBytes int
	usage     Usage
	anth      anthropicUsage
	// partial: the usage so far is an Anthropic message_start's, which
	// the message_delta at a complete message's end follows.
	partial bool
}

// NewStreamFilter returns a filter for a stream in dialect kind.
// clientWantsUsage tells whether the client asked for the usage chunk
// itself (Request.ClientWantsUsage); only OpenAI streams look at it.
func NewStreamFilter(kind Kind, clientWantsUsage bool) *StreamFilter {
	f := &StreamFilter{}
	f.Reset(kind, clientWantsUsage)
	return f
}

// NewResponsesFilter returns a filter for an OpenAI Responses API stream:
// typed events (no [DONE]), forwarded untouched; the text of the output
// deltas is kept, and the usage of the response.completed (or
// response.incomplete, response.failed) event.
func NewResponsesFilter() *StreamFilter {
	f := NewStreamFilter(OpenAI, true)
	f.responses = true
	return f
}

// Reset readies f for a new stream, keeping its buffers when they are small.
func (f *StreamFilter) Reset(kind Kind, clientWantsUsage bool) {
	*f = StreamFilter{
		kind:       kind,
		wantsUsage: clientWantsUsage,
		buf:        reuse(f.buf),
		out:        reuse(f.out),
		join:       reuse(f.join),
		text:       reuse(f.text),
	}
}

func reuse(b []byte) []byte {
	if cap(b) > keepBuffer {
		return nil
	}
	return b[:0]
}

// Usage is the usage the provider reported so far (Reported false if none).
func (f *StreamFilter) Usage() Usage { return f.usage }

// Partial reports an Anthropic stream whose message began (message_start,
// with its input and an output of 1) and never ended (no message_delta): an
// error event, or a provider that stopped. Its usage is not the answer's:
// the caller counts the text, as for a cut stream.
func (f *StreamFilter) Partial() bool { return f.partial }

// Text is the completion text seen so far (chat delta content, refusals,
// reasoning and tool-call arguments; completions text; Anthropic text,
// thinking and tool-input deltas), decoded from JSON, at most MaxStreamText
// bytes. It aliases the filter's buffer: valid until the next Write, Close
// or Reset.
func (f *StreamFilter) Text() []byte { return f.text }

// TextBytes is the length of all the completion text seen, including what
// did not fit in Text.
func (f *StreamFilter) TextBytes() int { return f.textBytes }

// Write consumes the next bytes of the upstream stream, in any chunking, and
// calls emit once per complete event with the bytes to send the client (the
// event including its terminating blank line). An event may be split across
// writes, and one write may complete several events; lines may end in "\n"
// or "\r\n". The slice given to emit is only valid during the call. An error
// from emit (the client went away) is returned at once, and no further event
// is emitted in this call.
func (f *StreamFilter) Write(p []byte, emit func(event []byte) error) error {
	f.buf = append(f.buf, p...)
	if !f.began {
		if len(f.buf) < len(utf8BOM) && bytes.HasPrefix(utf8BOM, f.buf) {
			return nil // what came so far may begin a byte-order mark
		}
		f.begin()
	}
	start := 0
	var err error
	for err == nil {
		end := f.eventEnd(start)
		if end < 0 {
			break
		}
		ev := f.buf[start:end]
		start, f.scan = end, end
		f.large = largeUnknown
		if f.skipping {
			f.skipping = false
			err = emit(ev)
		} else {
			err = f.event(ev, emit)
		}
	}
	if err == nil && len(f.buf)-start > maxPendingEvent && !f.holding(start) {
		// Keep the last two bytes: they may begin an event's end.
		cut := len(f.buf) - 2
		f.skipping = true
		f.large = largeSkipped // cut: the rest of it is not held either
		err = emit(f.buf[start:cut])
		start = cut
		f.scan = max(f.scan, start)
	}
	n := copy(f.buf, f.buf[start:])
	f.buf = f.buf[:n]
	f.scan = max(f.scan-start, 0)
	return err
}

// begin drops a byte-order mark the stream begins with (SSE lets a stream
// begin with one, and its clients ignore it), so that the first event's
// fields are read: anywhere else it is a field name's first character.
func (f *StreamFilter) begin() {
	f.began = true
	if bytes.HasPrefix(f.buf, utf8BOM) {
		f.buf = f.buf[:copy(f.buf, f.buf[len(utf8BOM):])]
	}
}

// holding reports whether the event pending at buf[start], past
// maxPendingEvent, is held whole still: the end of a Responses stream, by
// its event line or else the type its data begins with, up to
// maxPendingEndEvent. Decided once an event, as the type is looked for in
// all the bytes held.
func (f *StreamFilter) holding(start int) bool {
	if f.large == largeUnknown {
		f.large = largeSkipped
		ev := f.buf[start:]
		typ := eventType(ev)
		if typ == nil {
			typ = leadingType(ev)
		}
		if f.responses && responsesEnd(typ) {
			f.large = largeHeld
		}
	}
	return f.large == largeHeld && len(f.buf)-start <= maxPendingEndEvent
}

// leadingType is the "type" of an event's data when it is among the first
// members of the object there (a Responses event's comes first), or nil.
func leadingType(ev []byte) []byte {
	i := bytes.Index(ev, []byte("data:"))
	if i < 0 || (i > 0 && ev[i-1] != '\n') {
		return nil
	}
	p := ev[i+len("data:"):]
	p = p[:min(len(p), 4<<10)] // the members that fit in it
	it, ok := iterValue(p)
	for ok && it.obj {
		var k, v []byte
		if k, v, ok = it.next(); ok && string(k) == "type" && isString(v) {
			return v[1 : len(v)-1]
		}
	}
	return nil
}

// What is done with an event past maxPendingEvent (StreamFilter.large).
const (
	largeUnknown = iota // not decided: the event is not that large
	largeHeld           // held whole, up to maxPendingEndEvent
	largeSkipped        // forwarded as it comes, unparsed
)

// Close ends the stream: bytes left after the last complete event (an
// upstream that did not end its last event with a blank line, or a cut
// stream) are handled as one last event and emitted as they are unless they
// make a complete event the filter rewrites.
func (f *StreamFilter) Close(emit func(event []byte) error) error {
	if !f.began {
		f.begin()
	}
	if len(f.buf) == 0 {
		return nil
	}
	ev := f.buf
	f.buf, f.scan = f.buf[:0], 0
	if f.skipping {
		f.skipping = false
		return emit(ev)
	}
	return f.event(ev, emit)
}

// eventEnd finds the end of the event starting at buf[start] (just past the
// blank line that ends it), or -1 when it has not fully arrived.
func (f *StreamFilter) eventEnd(start int) int {
	b := f.buf
	i := max(f.scan, start)
	for {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			f.scan = len(b)
			return -1
		}
		k := i + j
		switch {
		case k+1 >= len(b):
			f.scan = k
			return -1
		case b[k+1] == '\n':
			return k + 2
		case b[k+1] == '\r':
			if k+2 >= len(b) {
				f.scan = k
				return -1
			}
			if b[k+2] == '\n' {
				return k + 3
			}
		}
		i = k + 1
	}
}

// dataLines finds the "data:" lines of an event. With exactly one, payload
// is its value and [ps, pe) its place in ev. With several, payload is their
// values joined by "\n" (in f.join) and ps is -1.
func (f *StreamFilter) dataLines(ev []byte) (payload []byte, ps, pe int) {
	count := 0
	for pos := 0; pos < len(ev); {
		le := len(ev)
		if j := bytes.IndexByte(ev[pos:], '\n'); j >= 0 {
			le = pos + j
		}
		ce := le
		if ce > pos && ev[ce-1] == '\r' {
			ce--
		}
		if ce-pos >= 5 && string(ev[pos:pos+5]) == "data:" {
			s := pos + 5
			if s < ce && ev[s] == ' ' {
				s++
			}
			switch count {
			case 0:
				ps, pe = s, ce
			case 1:
				f.join = append(append(append(f.join[:0], ev[ps:pe]...), '\n'), ev[s:ce]...)
			default:
				f.join = append(append(f.join, '\n'), ev[s:ce]...)
			}
			count++
		}
		pos = le + 1
	}
	switch count {
	case 0:
		return nil, -1, -1
	case 1:
		return ev[ps:pe], ps, pe
	}
	return f.join, -1, -1
}

// event handles one complete event.
func (f *StreamFilter) event(ev []byte, emit func([]byte) error) error {
	switch {
	case f.responses:
		f.responsesEvent(ev)
	case f.kind == OpenAI:
		return f.openAIEvent(ev, emit)
	case f.kind == Anthropic:
		f.anthropicEvent(ev)
	}
	return emit(ev)
}

// responsesEvent records the text and usage of one Responses API event.
// Only the output deltas and the events that end a response carry either;
// the others are not parsed.
func (f *StreamFilter) responsesEvent(ev []byte) {
	typ := eventType(ev)
	if typ != nil && !responsesText(typ) && !responsesEnd(typ) {
		return
	}
	p, _, _ := f.dataLines(ev)
	it, ok := iterValue(p)
	if !ok || !it.obj {
		return
	}
	var delta, response []byte
	for {
		k, v, ok := it.next()
		if !ok {
			break
		}
		switch string(k) {
		case "type":
			if typ == nil && isString(v) {
				typ = v[1 : len(v)-1]
			}
		case "delta":
			delta = v
		case "response":
			response = v
		}
	}
	switch {
	case responsesText(typ):
		if isString(delta) {
			f.addText(delta)
		}
	case responsesEnd(typ):
		r, ok := iterValue(response)
		if !ok || !r.obj {
			return
		}
		for {
			k, v, ok := r.next()
			if !ok {
				return
			}
			if string(k) == "usage" {
				if u, ok := openAIUsage(v); ok {
					f.usage = u
				}
			}
		}
	}
}

// responsesText: a Responses event whose delta is generated text.
func responsesText(typ []byte) bool {
	switch string(typ) {
	case "response.output_text.delta", "response.refusal.delta", "response.function_call_arguments.delta",
		"response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		return true
	}
	return false
}

// responsesEnd: a Responses event that ends the response, with its usage.
func responsesEnd(typ []byte) bool {
	switch string(typ) {
	case "response.completed", "response.incomplete", "response.failed":
		return true
	}
	return false
}

func (f *StreamFilter) openAIEvent(ev []byte, emit func([]byte) error) error {
	p, ps, pe := f.dataLines(ev)
	i := skipWS(p, 0)
	if i >= len(p) || p[i] != '{' { // no data, "[DONE]", or not an object
		return emit(ev)
	}
	drop, cutA, cutB := f.openAIChunk(p)
	switch {
	case drop:
		return nil
	case cutA >= 0 && ps >= 0:
		f.out = append(f.out[:0], ev[:ps]...)
		f.out = append(f.out, p[:cutA]...)
		f.out = append(f.out, p[cutB:]...)
		f.out = append(f.out, ev[pe:]...)
		return emit(f.out)
	}
	return emit(ev)
}

// openAIChunk records the text and usage of one chat.completion.chunk (or
// text_completion) object p. When the client did not ask for usage, drop
// tells to drop the usage-only chunk, and p[cutA:cutB] (cutA >= 0) is the
// top-level "usage":null member to cut, with its comma.
func (f *StreamFilter) openAIChunk(p []byte) (drop bool, cutA, cutB int) {
	cutA = -1
	it, _ := iterValue(p)
	var choices, usageObj, choicesEmpty bool
	for {
		k, v, ok := it.next()
		if !ok {
			break
		}
		switch string(k) {
		case "choices":
			choices = true
			choicesEmpty = f.openAIChoices(v)
		case "usage":
			if isNull(v) {
				if f.wantsUsage {
					continue
				}
				if it.prevEnd >= 0 { // cut from the end of the previous member
					cutA, cutB = it.prevEnd, it.valEnd
				} else { // first member: cut up to the next key
					cutA, cutB = it.keyStart, it.valEnd
					if j := skipWS(p, it.valEnd); j < len(p) && p[j] == ',' {
						cutB = skipWS(p, j+1)
					}
				}
			} else if u, ok := openAIUsage(v); ok {
				f.usage = u
				usageObj = true
			}
		}
	}
	drop = !f.wantsUsage && usageObj && choices && choicesEmpty
	return drop, cutA, cutB
}

// openAIChoices records the text of a chunk's choices; empty reports "[]".
func (f *StreamFilter) openAIChoices(v []byte) (empty bool) {
	it, ok := iterValue(v)
	if !ok {
		return false
	}
	for {
		_, choice, ok := it.next()
		if !ok {
			break
		}
		if bytes.IndexByte(choice[1:], '"') < 0 {
			continue // no strings at all, so no text
		}
		c, ok := iterValue(choice)
		if !ok || !c.obj {
			continue
		}
		for {
			k, v, ok := c.next()
			if !ok {
				break
			}
			switch string(k) {
			case "text": // /v1/completions
				f.addText(v)
			case "delta": // /v1/chat/completions
				f.openAIDelta(v)
			}
		}
	}
	return it.n == 0
}

func (f *StreamFilter) openAIDelta(v []byte) {
	d, ok := iterValue(v)
	if !ok || !d.obj {
		return
	}
	for {
		k, v, ok := d.next()
		if !ok {
			return
		}
		switch string(k) {
		case "content", "refusal", "reasoning_content", "reasoning":
			f.addText(v)
		case "tool_calls":
			calls, ok := iterValue(v)
			if !ok {
				continue
			}
			for {
				_, call, ok := calls.next()
				if !ok {
					break
				}
				c, ok := iterValue(call)
				if !ok || !c.obj {
					continue
				}
				for {
					k, fn, ok := c.next()
					if !ok {
						break
					}
					if string(k) != "function" {
						continue
					}
					fi, ok := iterValue(fn)
					if !ok || !fi.obj {
						continue
					}
					for {
						k, v, ok := fi.next()
						if !ok {
							break
						}
						if string(k) == "name" || string(k) == "arguments" {
							f.addText(v)
						}
					}
				}
			}
		}
	}
}

// anthropicEvent records the text and usage of one Anthropic event. Only
// message_start, message_delta and content_block_delta can carry either, and
// the other events are not parsed.
func (f *StreamFilter) anthropicEvent(ev []byte) {
	typ := eventType(ev)
	if typ != nil && !anthropicInteresting(typ) {
		return
	}
	if typ == nil && !bytes.Contains(ev, []byte(`"message_`)) && !bytes.Contains(ev, []byte(`"content_block_delta"`)) {
		return
	}
	p, _, _ := f.dataLines(ev)
	it, ok := iterValue(p)
	if !ok || !it.obj {
		return
	}
	// The event: line, when there is one, names the type; otherwise the
	// data's "type" does (it is the first member in practice, but need not
	// be): keep the candidates and decide at the end.
	var message, delta, usage []byte
	for {
		k, v, ok := it.next()
		if !ok {
			break
		}
		switch string(k) {
		case "type":
			if typ == nil && isString(v) {
				typ = v[1 : len(v)-1]
			}
		case "message":
			message = v
		case "delta":
			delta = v
		case "usage":
			usage = v
		}
	}
	switch string(typ) {
	case "message_start":
		m, ok := iterValue(message)
		if !ok || !m.obj {
			return
		}
		for {
			k, v, ok := m.next()
			if !ok {
				return
			}
			if string(k) == "usage" {
				f.anth = anthropicUsage{}
				if f.anth.read(v) {
					f.usage = f.anth.usage()
				}
				f.partial = true
			}
		}
	case "message_delta":
		if f.anth.read(usage) {
			f.usage = f.anth.usage()
		}
		f.partial = false
	case "content_block_delta":
		d, ok := iterValue(delta)
		if !ok || !d.obj {
			return
		}
		for {
			k, v, ok := d.next()
			if !ok {
				return
			}
			switch string(k) {
			case "text", "partial_json", "thinking":
				f.addText(v)
			}
		}
	}
}

func anthropicInteresting(typ []byte) bool {
	switch string(typ) {
	case "message_start", "message_delta", "content_block_delta":
		return true
	}
	return false
}

// eventType is the value of the event's first "event:" field, nil if it has
// none.
func eventType(ev []byte) []byte {
	for pos := 0; pos < len(ev); {
		le := len(ev)
		if j := bytes.IndexByte(ev[pos:], '\n'); j >= 0 {
			le = pos + j
		}
		line := ev[pos:le]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if len(line) >= 6 && string(line[:6]) == "event:" {
			v := line[6:]
			if len(v) > 0 && v[0] == ' ' {
				v = v[1:]
			}
			if len(v) == 0 { // an empty type means the default, as if absent
				return nil
			}
			return v
		}
		pos = le + 1
	}
	return nil
}

func (f *StreamFilter) addText(v []byte) {
	var n int
	f.text, n = appendString(f.text, v, MaxStreamText)
	f.textBytes += n
}

// LooksLikeSSE reports whether an answer is an SSE stream whatever its
// Content-Type says (some servers set none, or text/plain): past blank
// space and a byte-order mark, it starts with an SSE field (data, event,
// id, retry) or comment. A JSON answer starts with { or [.
func LooksLikeSSE(answer []byte) bool {
	b := bytes.TrimLeft(bytes.TrimPrefix(answer, utf8BOM), " \t\r\n")
	for _, field := range sseFields {
		if bytes.HasPrefix(b, field) {
			return true
		}
	}
	return false
}

var (
	utf8BOM   = []byte("\xef\xbb\xbf")
	sseFields = [][]byte{[]byte("data:"), []byte("event:"), []byte("id:"), []byte("retry:"), []byte(":")}
)
