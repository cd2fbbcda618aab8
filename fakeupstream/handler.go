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
	rec := &Record{Received: time.Now()}
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
	valid := gjson.Valid(js) && gjson.Parse(js).IsObject()
	var root gjson.Result
	if valid {
		root = gjson.Parse(js)
		rec.Model = root.Get("model").String()
		if u := root.Get("user"); u.Type == gjson.String {
			rec.User = u.Str
		} else {
			rec.User = root.Get("metadata.user_id").String()
		}
		rec.Stream = root.Get("stream").Bool()
		rec.IncludeUsage = root.Get("stream_options.include_usage").Bool()
		rec.PromptTokens = promptTokens(root, rec.Model, o.CountTokens)
	}
	ep := endpointOf(ctx.Path())
	anthropic := ep == epMessages

	// The limits decide at arrival, before Latency, as a provider's front
	// door does; an admitted request holds its concurrency slot until its
	// answer is complete.
	var maxTokens int64 // max_completion_tokens, else max_tokens
	var v verdict
	if valid && ep != epUnknown && ctx.IsPost() && o.Status == 0 {
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
			if anthropic {
				rec.TokenCharge = max(mt, 0)
			}
		}
		rec.TokenCharge += int64(rec.PromptTokens)
		v = s.lim.admit(&o.Limits, rec.Model, rec.TokenCharge)
		if v.ok {
			ls = v.lease
		} else {
			rec.RateLimited, rec.LimitedBy = true, v.by
		}
	}
	s.addRecord(rec, o.MaxRecords)

	if o.Latency > 0 && !s.sleep(o.Latency) {
		writeError(ctx, fasthttp.StatusServiceUnavailable, "fakeupstream: server closing")
		return
	}
	if o.Status != 0 {
		writeError(ctx, o.Status, "fakeupstream: forced status "+strconv.Itoa(o.Status))
		return
	}
	if ep == epUnknown {
		writeError(ctx, fasthttp.StatusNotFound, "fakeupstream: unknown path "+strconv.Quote(rec.Path))
		return
	}
	if !ctx.IsPost() {
		writeError(ctx, fasthttp.StatusMethodNotAllowed, "fakeupstream: use POST")
		return
	}
	if !valid {
		writeError(ctx, fasthttp.StatusBadRequest, "fakeupstream: request body is not a JSON object")
		return
	}
	if rec.RateLimited {
		s.writeRateLimited(ctx, anthropic, o, rec.Model, &v)
		return
	}
	s.setRateHeaders(ctx, anthropic, o, rec.Model, v.ms)

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
	var t *time.Timer
	if interval > 0 {
		t = time.NewTimer(interval)
		t.Stop()
		defer t.Stop()
	}
	wait := func() bool {
		if t == nil {
			select {
			case <-s.closing:
				return false
			default:
				return true
			}
		}
		t.Reset(interval)
		select {
		case <-t.C:
			return true
		case <-s.closing:
			return false
		}
	}
	buf := make([]byte, 0, 512)
	emit := func(b []byte) bool {
		if _, err := w.Write(b); err != nil {
			return false
		}
		return w.Flush() == nil
	}

	var head, tail []byte // around the JSON-quoted token text of a content event
	switch rq.ep {
	case epMessages:
		b := append(buf[:0], "event: message_start\ndata: "...)
		b = appendMessageStart(b, rq, noUsage)
		b = append(b, "\n\n"...)
		b = append(b, "event: content_block_start\ndata: "+
			`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`+"\n\n"+
			"event: ping\ndata: "+`{"type":"ping"}`+"\n\n"...)
		if !emit(b) {
			return 0, false
		}
		head = []byte("event: content_block_delta\ndata: " +
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`)
		tail = []byte("}}\n\n")
	case epChat:
		head = appendOpenAIChunkHead(nil, rq, "chat.completion.chunk")
		b := append(buf[:0], head...)
		b = append(b, `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]`...)
		b = appendUsageNull(b, rq)
		if !emit(b) {
			return 0, false
		}
		head = append(head, `{"index":0,"delta":{"content":`...)
		tail = appendUsageNull([]byte(`},"logprobs":null,"finish_reason":null}]`), rq)
	case epCompletions:
		head = appendOpenAIChunkHead(nil, rq, "text_completion")
		head = append(head, `{"text":`...)
		tail = appendUsageNull([]byte(`,"index":0,"logprobs":null,"finish_reason":null}]`), rq)
	case epResponses:
		b := append(buf[:0], "event: response.created\ndata: "+`{"type":"response.created","response":`...)
		b = appendResponse(b, rq, "in_progress", 0, false)
		b = append(b, "}\n\n"...)
		if !emit(b) {
			return 0, false
		}
		head = []byte("event: response.output_text.delta\ndata: " +
			`{"type":"response.output_text.delta","item_id":"msg_` + rq.id + `","output_index":0,"content_index":0,"delta":`)
		tail = []byte("}\n\n")
	}

	for i := range rq.completion {
		if !wait() {
			return i, false
		}
		b := append(buf[:0], head...)
		b = append(b, quotedWords[i%len(words)]...)
		b = append(b, tail...)
		if !emit(b) {
			return i, false
		}
	}

	n := rq.completion
	b := buf[:0]
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
			b = appendOpenAIUsage(b, rq.prompt, n)
			b = append(b, "}\n\n"...)
		}
		b = append(b, "data: [DONE]\n\n"...)
	case epResponses: // no [DONE]: response.completed ends the stream
		b = append(b, "event: response.completed\ndata: "+`{"type":"response.completed","response":`...)
		b = appendResponse(b, rq, "completed", n, !noUsage)
		b = append(b, "}\n\n"...)
	}
	beforeLast(n)
	if !emit(b) {
		return n, false
	}
	return n, true
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
