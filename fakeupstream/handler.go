package fakeupstream

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"time"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

type endpoint int

const (
	epUnknown endpoint = iota
	epChat
	epCompletions
	epEmbeddings
	epMessages
	epResponses
)

func endpointOf(path []byte) endpoint {
	switch string(path) {
	case "/v1/chat/completions":
		return epChat
	case "/v1/completions":
		return epCompletions
	case "/v1/embeddings":
		return epEmbeddings
	case "/v1/messages":
		return epMessages
	case "/v1/responses":
		return epResponses
	}
	return epUnknown
}

const (
	ctJSON = "application/json"
	ctSSE  = "text/event-stream; charset=utf-8"
)

// Handler answers one request. It may be mounted in any fasthttp.Server.
func (s *Server) Handler(ctx *fasthttp.RequestCtx) {
	switch string(ctx.Path()) {
	case "/_records":
		if !ctx.IsGet() {
			writeError(ctx, fasthttp.StatusMethodNotAllowed, "use GET")
			return
		}
		writeJSON(ctx, s.recordsNoBody())
		return
	case "/_stats":
		if !ctx.IsGet() {
			writeError(ctx, fasthttp.StatusMethodNotAllowed, "use GET")
			return
		}
		writeJSON(ctx, s.Stats())
		return
	case "/_limits":
		switch {
		case ctx.IsGet():
		case ctx.IsPost():
			var l ProviderLimits
			if err := json.Unmarshal(ctx.PostBody(), &l); err != nil {
				writeError(ctx, fasthttp.StatusBadRequest, "fakeupstream: limits: "+err.Error())
				return
			}
			s.SetLimits(l)
		default:
			writeError(ctx, fasthttp.StatusMethodNotAllowed, "use GET or POST")
			return
		}
		writeJSON(ctx, s.Limits())
		return
	case "/_reset":
		if !ctx.IsPost() {
			writeError(ctx, fasthttp.StatusMethodNotAllowed, "use POST")
			return
		}
		s.Reset()
		ctx.SetContentType(ctJSON)
		ctx.SetBodyString(`{"ok":true}`)
		return
	}
	s.serveAPI(ctx)
}

func writeJSON(ctx *fasthttp.RequestCtx, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(ctx, fasthttp.StatusInternalServerError, err.Error())
		return
	}
	ctx.SetContentType(ctJSON)
	ctx.SetBody(b)
}

// request is what serveAPI extracted from one API request.
type request struct {
	ep           endpoint
	model        string
	stream       bool
	includeUsage bool
	prompt       int
	completion   int
	capped       bool // the completion was cut by max_tokens
	inputs       int  // embeddings: number of inputs
	id           string
	created      int64
}

func (s *Server) serveAPI(ctx *fasthttp.RequestCtx) {
	rec := &Record{Received: time.Now(), RequestID: string(ctx.Request.Header.Peek("x-request-id"))}
	s.enter()
	streaming := false
	completion := 0
	var ls lease // held if the limits admitted the request
	// A JSON answer leaves the in-flight count when the handler returns,
	// just before fasthttp writes it (see writeStream's beforeLast).
	defer func() {
		if !streaming {
			s.finish(rec, ctx.Response.StatusCode(), completion, false, ls)
		}
	}()
	o := s.opts.Load()
	root, valid := readRecord(ctx, rec, o.CountTokens)
	ep := endpointOf(ctx.Path())

	// The limits decide at arrival, before Latency, as a provider's front
	// door does; an admitted request holds its concurrency slot until its
	// answer is complete.
	var maxTokens int64 // max_completion_tokens, else max_tokens
	var v verdict
	if valid && ep != epUnknown && ctx.IsPost() && o.Status == 0 {
		maxTokens, v = s.admit(o, rec, root, ep)
		if v.ok {
			ls = v.lease
		}
	}
	s.addRecord(rec, o.MaxRecords)

	if o.Latency > 0 && !s.sleep(o.Latency) {
		writeError(ctx, fasthttp.StatusServiceUnavailable, "fakeupstream: server closing")
		return
	}
	if s.refused(ctx, o, rec, ep, valid, &v) {
		return
	}
	s.setRateHeaders(ctx, ep == epMessages, o, rec.Model, v.ms)
	rq := s.newRequest(o, rec, ep, root, maxTokens)
	if !rq.stream {
		completion = rq.completion
		ctx.SetContentType(ctJSON)
		ctx.SetBody(appendJSONResponse(make([]byte, 0, 256+5*rq.completion), rq, !o.NoUsage))
		return
	}
	if !s.beginStream() {
		writeError(ctx, fasthttp.StatusServiceUnavailable, "fakeupstream: server closing")
		return
	}
	streaming = true
	s.answerStream(ctx, o, rec, rq, ls)
}

// readRecord fills rec from the request: its path, body and headers and,
// if the body is a JSON object (valid), what it asks for. root is that
// object.
func readRecord(ctx *fasthttp.RequestCtx, rec *Record, countTokens func(model, text string) int) (root gjson.Result, valid bool) {
	// One private copy of the body: it is the record's Body and, as it is
	// never modified, gjson reads it in place.
	var body []byte
	if b := ctx.PostBody(); len(b) > 0 {
		body = append(make([]byte, 0, len(b)), b...)
	}
	js := ""
	if len(body) > 0 {
		js = unsafe.String(unsafe.SliceData(body), len(body))
	}
	rec.Path = string(ctx.Path())
	rec.Body = body
	rec.APIKey = apiKey(&ctx.Request.Header)
	rec.AnthropicVersion = string(ctx.Request.Header.Peek("anthropic-version"))
	if !gjson.Valid(js) || !gjson.Parse(js).IsObject() {
		return root, false
	}
	root = gjson.Parse(js)
	rec.Model = root.Get("model").String()
	if u := root.Get("user"); u.Type == gjson.String {
		rec.User = u.Str
	} else {
		rec.User = root.Get("metadata.user_id").String()
	}
	rec.Stream = root.Get("stream").Bool()
	rec.IncludeUsage = root.Get("stream_options.include_usage").Bool()
	rec.PromptTokens = promptTokens(root, rec.Model, countTokens)
	return root, true
}

// admit asks the limits for room for rec: its prompt and the most it may
// complete (maxTokens; Anthropic's charge is its max_tokens). A refusal is
// noted in rec.
func (s *Server) admit(o *Options, rec *Record, root gjson.Result, ep endpoint) (maxTokens int64, v verdict) {
	if ep != epEmbeddings {
		maxTokens = root.Get("max_completion_tokens").Int()
		if ep == epResponses {
			maxTokens = root.Get("max_output_tokens").Int()
		}
		mt := root.Get("max_tokens").Int()
		if maxTokens <= 0 {
			maxTokens = mt
		}
		rec.TokenCharge = max(maxTokens, 0)
		if ep == epMessages {
			rec.TokenCharge = max(mt, 0)
		}
	}
	rec.TokenCharge += int64(rec.PromptTokens)
	v = s.lim.admit(&o.Limits, rec.Model, rec.TokenCharge)
	if !v.ok {
		rec.RateLimited, rec.LimitedBy = true, v.by
	}
	return maxTokens, v
}

// refused answers with an error a request that gets no completion: a
// status is forced, the path or method is not the API's, the body is not a
// JSON object or the limits refused it (v). It reports whether it answered.
func (s *Server) refused(ctx *fasthttp.RequestCtx, o *Options, rec *Record, ep endpoint, valid bool, v *verdict) bool {
	switch {
	case o.Status != 0:
		writeError(ctx, o.Status, "fakeupstream: forced status "+strconv.Itoa(o.Status))
	case ep == epUnknown:
		writeError(ctx, fasthttp.StatusNotFound, "fakeupstream: unknown path "+strconv.Quote(rec.Path))
	case !ctx.IsPost():
		writeError(ctx, fasthttp.StatusMethodNotAllowed, "fakeupstream: use POST")
	case !valid:
		writeError(ctx, fasthttp.StatusBadRequest, "fakeupstream: request body is not a JSON object")
	case rec.RateLimited:
		s.writeRateLimited(ctx, ep == epMessages, o, rec.Model, v)
	default:
		return false
	}
	return true
}

// newRequest is the answer to give rec: its id, and how many words it
// completes (at most maxTokens if set) or inputs it embeds.
func (s *Server) newRequest(o *Options, rec *Record, ep endpoint, root gjson.Result, maxTokens int64) *request {
	rq := &request{
		ep:           ep,
		model:        rec.Model,
		stream:       rec.Stream && ep != epEmbeddings,
		includeUsage: rec.IncludeUsage && !o.NoUsage,
		prompt:       rec.PromptTokens,
		created:      rec.Received.Unix(),
		id:           s.newID(ep),
	}
	if ep == epEmbeddings {
		rq.inputs = countInputs(root.Get("input"))
	} else {
		rq.completion = s.drawCompletion(o)
		if maxTokens > 0 && int64(rq.completion) > maxTokens {
			rq.completion, rq.capped = int(maxTokens), true
		}
	}
	return rq
}

// answerStream answers rq with server-sent events; the request leaves the
// in-flight count as its stream ends (beginStream counted the stream).
func (s *Server) answerStream(ctx *fasthttp.RequestCtx, o *Options, rec *Record, rq *request, ls lease) {
	ctx.SetContentType(ctSSE)
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	noUsage, interval := o.NoUsage, o.ChunkInterval
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		// Runs in its own goroutine: it must not touch ctx.
		defer s.streams.Done()
		finished := false
		sent, ok := s.writeStream(w, rq, noUsage, interval, func(n int) {
			finished = true
			s.finish(rec, fasthttp.StatusOK, n, false, ls)
		})
		switch {
		case !finished:
			s.finish(rec, fasthttp.StatusOK, sent, true, ls)
		case !ok:
			s.markAborted(rec)
		}
	})
}

func (s *Server) newID(ep endpoint) string {
	prefix := "chatcmpl-fake"
	switch ep {
	case epCompletions:
		prefix = "cmpl-fake"
	case epMessages:
		prefix = "msg_fake"
	case epEmbeddings:
		prefix = "emb-fake"
	case epResponses:
		prefix = "resp_fake"
	}
	return prefix + strconv.FormatUint(s.ids.Add(1), 10)
}

// sleep waits for d; false if the server was closed meanwhile.
func (s *Server) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.closing:
		return false
	}
}

// apiKey returns the bearer token, or else the x-api-key header.
func apiKey(h *fasthttp.RequestHeader) string {
	if a := h.Peek("Authorization"); len(a) > 0 {
		if len(a) > 7 && bytes.EqualFold(a[:7], []byte("Bearer ")) {
			a = a[7:]
		}
		return string(bytes.TrimSpace(a))
	}
	return string(h.Peek("x-api-key"))
}

func (s *Server) errorHandler(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		writeError(ctx, fasthttp.StatusRequestEntityTooLarge, "fakeupstream: request body too large")
		return
	}
	writeError(ctx, fasthttp.StatusBadRequest, "fakeupstream: "+err.Error())
}

// writeError answers with an OpenAI-style error body.
func writeError(ctx *fasthttp.RequestCtx, status int, msg string) {
	typ, code := "invalid_request_error", "null"
	switch {
	case status == fasthttp.StatusTooManyRequests:
		typ, code = "rate_limit_error", `"rate_limit_exceeded"`
	case status == fasthttp.StatusUnauthorized:
		code = `"invalid_api_key"`
	case status == fasthttp.StatusNotFound:
		code = `"unknown_url"`
	case status >= 500:
		typ = "server_error"
	}
	b := make([]byte, 0, 96+len(msg))
	b = append(b, `{"error":{"message":`...)
	b = appendJSONString(b, msg)
	b = append(b, `,"type":"`...)
	b = append(b, typ...)
	b = append(b, `","param":null,"code":`...)
	b = append(b, code...)
	b = append(b, "}}"...)
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType(ctJSON)
	ctx.SetBody(b)
}

// writeStream writes the SSE events of rq, flushing after each. It returns
// the number of content tokens written and false if the stream was cut
// (write error: the client went away; or the server is closing).
//
// beforeLast is called just before the last write (the one that ends the
// stream) is attempted: a client that has seen the end of the stream must
// never find the request still counted in flight.
func (s *Server) writeStream(w *bufio.Writer, rq *request, noUsage bool, interval time.Duration, beforeLast func(n int)) (int, bool) {
	ew := newEventWriter(w, interval, s.closing)
	defer ew.stop()
	buf := make([]byte, 0, 512)
	opening, head, tail := streamOpening(buf, rq, noUsage)
	if len(opening) > 0 && !ew.emit(opening) {
		return 0, false
	}
	for i := range rq.completion {
		if !ew.wait() {
			return i, false
		}
		b := append(buf[:0], head...)
		b = append(b, quotedWords[i%len(words)]...)
		b = append(b, tail...)
		if !ew.emit(b) {
			return i, false
		}
	}
	n := rq.completion
	b := appendStreamEnd(buf[:0], rq, noUsage)
	beforeLast(n)
	if !ew.emit(b) {
		return n, false
	}
	return n, true
}

// eventWriter writes a stream's events, each flushed, the content ones an
// interval apart; the server's closing cuts the stream.
type eventWriter struct {
	w        *bufio.Writer
	interval time.Duration
	t        *time.Timer // nil without an interval
	closing  <-chan struct{}
}

// newEventWriter writes to w; an interval of 0 sends the events at once.
func newEventWriter(w *bufio.Writer, interval time.Duration, closing <-chan struct{}) *eventWriter {
	ew := &eventWriter{w: w, interval: interval, closing: closing}
	if interval > 0 {
		ew.t = time.NewTimer(interval)
		ew.t.Stop()
	}
	return ew
}

// stop releases the timer.
func (ew *eventWriter) stop() {
	if ew.t != nil {
		ew.t.Stop()
	}
}

// wait waits for the next content event's time; false if the server is
// closing.
func (ew *eventWriter) wait() bool {
	if ew.t == nil {
		select {
		case <-ew.closing:
			return false
		default:
			return true
		}
	}
	ew.t.Reset(ew.interval)
	select {
	case <-ew.t.C:
		return true
	case <-ew.closing:
		return false
	}
}

// emit writes and flushes b; false if the client went away.
func (ew *eventWriter) emit(b []byte) bool {
	if _, err := ew.w.Write(b); err != nil {
		return false
	}
	return ew.w.Flush() == nil
}

// streamOpening is what rq's stream sends before its content, built in buf
// (nothing for a completions stream), and the head and tail of its content
// events, around the JSON-quoted token text.
func streamOpening(buf []byte, rq *request, noUsage bool) (opening, head, tail []byte) {
	switch rq.ep {
	case epMessages:
		b := append(buf[:0], "event: message_start\ndata: "...)
		b = appendMessageStart(b, rq, noUsage)
		b = append(b, "\n\n"...)
		b = append(b, "event: content_block_start\ndata: "+
			`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`+"\n\n"+
			"event: ping\ndata: "+`{"type":"ping"}`+"\n\n"...)
		head = []byte("event: content_block_delta\ndata: " +
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`)
		return b, head, []byte("}}\n\n")
	case epChat:
		head = appendOpenAIChunkHead(nil, rq, "chat.completion.chunk")
		b := append(buf[:0], head...)
		b = append(b, `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]`...)
		b = appendUsageNull(b, rq)
		head = append(head, `{"index":0,"delta":{"content":`...)
		return b, head, appendUsageNull([]byte(`},"logprobs":null,"finish_reason":null}]`), rq)
	case epCompletions:
		head = appendOpenAIChunkHead(nil, rq, "text_completion")
		head = append(head, `{"text":`...)
		return nil, head, appendUsageNull([]byte(`,"index":0,"logprobs":null,"finish_reason":null}]`), rq)
	case epResponses:
		b := append(buf[:0], "event: response.created\ndata: "+`{"type":"response.created","response":`...)
		b = appendResponse(b, rq, "in_progress", 0, false)
		b = append(b, "}\n\n"...)
		head = []byte("event: response.output_text.delta\ndata: " +
			`{"type":"response.output_text.delta","item_id":"msg_` + rq.id + `","output_index":0,"content_index":0,"delta":`)
		return b, head, []byte("}\n\n")
	}
	return nil, nil, nil
}

// appendStreamEnd appends the events that end rq's stream, after its
// rq.completion content events.
func appendStreamEnd(b []byte, rq *request, noUsage bool) []byte {
	n := rq.completion
	switch rq.ep {
	case epMessages:
		b = append(b, "event: content_block_stop\ndata: "+`{"type":"content_block_stop","index":0}`+"\n\n"+
			"event: message_delta\ndata: "+`{"type":"message_delta","delta":{"stop_reason":`...)
		b = appendJSONString(b, anthropicStopReason(rq))
		b = append(b, `,"stop_sequence":null}`...)
		if !noUsage {
			b = append(b, `,"usage":{"output_tokens":`...)
			b = strconv.AppendInt(b, int64(n), 10)
			b = append(b, '}')
		}
		b = append(b, "}\n\nevent: message_stop\ndata: "+`{"type":"message_stop"}`+"\n\n"...)
	case epChat, epCompletions:
		b = appendOpenAIStreamEnd(b, rq)
	case epResponses: // no [DONE]: response.completed ends the stream
		b = append(b, "event: response.completed\ndata: "+`{"type":"response.completed","response":`...)
		b = appendResponse(b, rq, "completed", n, !noUsage)
		b = append(b, "}\n\n"...)
	}
	return b
}

// appendOpenAIStreamEnd appends the chunk with the finish reason, the usage
// chunk if the client asked for it, and [DONE].
func appendOpenAIStreamEnd(b []byte, rq *request) []byte {
	obj := "chat.completion.chunk"
	if rq.ep == epCompletions {
		obj = "text_completion"
	}
	b = appendOpenAIChunkHead(b, rq, obj)
	if rq.ep == epChat {
		b = append(b, `{"index":0,"delta":{},"logprobs":null,"finish_reason":`...)
	} else {
		b = append(b, `{"text":"","index":0,"logprobs":null,"finish_reason":`...)
	}
	b = appendJSONString(b, openAIFinishReason(rq))
	b = append(b, "}]"...)
	b = appendUsageNull(b, rq)
	if rq.includeUsage {
		b = appendOpenAIChunkHead(b, rq, obj) // ends with `"choices":[`
		b = append(b, `],"usage":`...)
		b = appendOpenAIUsage(b, rq.prompt, rq.completion)
		b = append(b, "}\n\n"...)
	}
	return append(b, "data: [DONE]\n\n"...)
}

// appendOpenAIChunkHead appends `data: {"id":…,"choices":[`.
func appendOpenAIChunkHead(b []byte, rq *request, object string) []byte {
	b = append(b, `data: {"id":`...)
	b = appendJSONString(b, rq.id)
	b = append(b, `,"object":"`...)
	b = append(b, object...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, rq.created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, rq.model)
	if rq.ep == epChat {
		b = append(b, `,"system_fingerprint":"fp_fakeupstream"`...)
	}
	return append(b, `,"choices":[`...)
}

// appendUsageNull closes an OpenAI chunk, with "usage":null when the client
// asked for a usage chunk (as OpenAI does).
func appendUsageNull(b []byte, rq *request) []byte {
	if rq.includeUsage {
		b = append(b, `,"usage":null`...)
	}
	return append(b, "}\n\n"...)
}

func appendOpenAIUsage(b []byte, prompt, completion int) []byte {
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(completion), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt+completion), 10)
	return append(b, '}')
}

func openAIFinishReason(rq *request) string {
	if rq.capped {
		return "length"
	}
	return "stop"
}

func anthropicStopReason(rq *request) string {
	if rq.capped {
		return "max_tokens"
	}
	return "end_turn"
}

// appendMessageStart appends the data of Anthropic's message_start event.
func appendMessageStart(b []byte, rq *request, noUsage bool) []byte {
	b = append(b, `{"type":"message_start","message":{"id":`...)
	b = appendJSONString(b, rq.id)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = appendJSONString(b, rq.model)
	b = append(b, `,"content":[],"stop_reason":null,"stop_sequence":null`...)
	if !noUsage {
		b = append(b, `,"usage":{"input_tokens":`...)
		b = strconv.AppendInt(b, int64(rq.prompt), 10)
		b = append(b, `,"output_tokens":1}`...)
	}
	return append(b, "}}"...)
}

// appendResponse appends a Responses API response object for rq, with
// completion words of output text and, if usage, its usage.
func appendResponse(b []byte, rq *request, status string, completion int, usage bool) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, rq.id)
	b = append(b, `,"object":"response","created_at":`...)
	b = strconv.AppendInt(b, rq.created, 10)
	b = append(b, `,"status":"`...)
	b = append(b, status...)
	b = append(b, `","model":`...)
	b = appendJSONString(b, rq.model)
	b = append(b, `,"output":[`...)
	if completion > 0 {
		b = append(b, `{"type":"message","id":"msg_`...)
		b = append(b, rq.id...)
		b = append(b, `","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"text":"`...)
		b = appendText(b, completion)
		b = append(b, `"}]}`...)
	}
	b = append(b, ']')
	if usage {
		b = append(b, `,"usage":{"input_tokens":`...)
		b = strconv.AppendInt(b, int64(rq.prompt), 10)
		b = append(b, `,"output_tokens":`...)
		b = strconv.AppendInt(b, int64(completion), 10)
		b = append(b, `,"total_tokens":`...)
		b = strconv.AppendInt(b, int64(rq.prompt+completion), 10)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendJSONResponse appends the non-streamed answer to rq.
func appendJSONResponse(b []byte, rq *request, usage bool) []byte {
	switch rq.ep {
	case epResponses:
		return appendResponse(b, rq, "completed", rq.completion, usage)
	case epEmbeddings:
		b = append(b, `{"object":"list","data":[`...)
		for i := range rq.inputs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"object":"embedding","index":`...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, `,"embedding":[`...)
			for j := range embeddingDims {
				if j > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendFloat(b, embeddingValue(i, j), 'f', -1, 64)
			}
			b = append(b, "]}"...)
		}
		b = append(b, `],"model":`...)
		b = appendJSONString(b, rq.model)
		if usage {
			b = append(b, `,"usage":{"prompt_tokens":`...)
			b = strconv.AppendInt(b, int64(rq.prompt), 10)
			b = append(b, `,"total_tokens":`...)
			b = strconv.AppendInt(b, int64(rq.prompt), 10)
			b = append(b, '}')
		}
		return append(b, '}')
	case epMessages:
		b = append(b, `{"id":`...)
		b = appendJSONString(b, rq.id)
		b = append(b, `,"type":"message","role":"assistant","model":`...)
		b = appendJSONString(b, rq.model)
		b = append(b, `,"content":[{"type":"text","text":"`...)
		b = appendText(b, rq.completion)
		b = append(b, `"}],"stop_reason":`...)
		b = appendJSONString(b, anthropicStopReason(rq))
		b = append(b, `,"stop_sequence":null`...)
		if usage {
			b = append(b, `,"usage":{"input_tokens":`...)
			b = strconv.AppendInt(b, int64(rq.prompt), 10)
			b = append(b, `,"output_tokens":`...)
			b = strconv.AppendInt(b, int64(rq.completion), 10)
			b = append(b, '}')
		}
		return append(b, '}')
	}
	obj := "chat.completion"
	if rq.ep == epCompletions {
		obj = "text_completion"
	}
	b = append(b, `{"id":`...)
	b = appendJSONString(b, rq.id)
	b = append(b, `,"object":"`...)
	b = append(b, obj...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, rq.created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, rq.model)
	if rq.ep == epChat {
		b = append(b, `,"system_fingerprint":"fp_fakeupstream","choices":[{"index":0,"message":{"role":"assistant","content":"`...)
		b = appendText(b, rq.completion)
		b = append(b, `","refusal":null},"logprobs":null,"finish_reason":`...)
	} else {
		b = append(b, `,"choices":[{"text":"`...)
		b = appendText(b, rq.completion)
		b = append(b, `","index":0,"logprobs":null,"finish_reason":`...)
	}
	b = appendJSONString(b, openAIFinishReason(rq))
	b = append(b, "}]"...)
	if usage {
		b = append(b, `,"usage":`...)
		b = appendOpenAIUsage(b, rq.prompt, rq.completion)
	}
	return append(b, '}')
}

const embeddingDims = 8

// embeddingValue is a deterministic component of the fake embedding of input i.
func embeddingValue(i, j int) float64 {
	v := (i*embeddingDims+j)*7919%2000 - 1000
	return float64(v) / 1000
}
