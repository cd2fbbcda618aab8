package usage

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/router/internal/reply"
	"github.com/ringgate/ringgate/upstream"
)

// Late reads the usage of resp, the answer (status) to c from a provider
// of kind whose client is gone, as the router reads an answer it passes
// on: a JSON answer, or an SSE one (by its Content-Type or its first
// line), read whole (a JSON request), or an answer to a stream request
// that is not text/event-stream, read now (bounded by reply.ReadAnswer). whole is false for a stream left unread:
// dropping it closes the connection and cuts the generation, whose length
// is unknown (the reservation stands).
func (k *Tokens) Late(c Call, kind upstream.Kind, status int, resp *fasthttp.Response) (u upstream.Usage, ok bool, completion int, whole bool) {
	sse := bytes.HasPrefix(resp.Header.ContentType(), []byte("text/event-stream"))
	var body []byte
	if resp.BodyStream() != nil {
		if sse {
			return u, false, 0, false
		}
		var read fasthttp.Response
		if err := reply.ReadAnswer(&read, resp); err != nil {
			return u, false, 0, false
		}
		body = read.Body()
	} else {
		body = resp.Body() // (with a body stream, Body would read it)
	}
	if status == fasthttp.StatusOK && (sse || upstream.LooksLikeSSE(body)) {
		u, ok, completion = k.FilterWhole(c, kind, body, func([]byte) error { return nil })
		return u, ok, completion, true
	}
	u, ok, completion = k.AnswerUsage(c, kind, status, body)
	return u, ok, completion, true
}
