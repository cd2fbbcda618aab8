package usage

import (
	"net/http"

	"github.com/ringgate/ringgate/upstream"
)

// Late is the usage of body, the answer (status) to c from a provider of
// kind whose client is gone, read whole (reply.Dropped), as the router
// reads an answer it passes on: an SSE one (sse: by its Content-Type, or
// by its first line) through c's stream filter, any other as JSON.
func (k *Tokens) Late(c Call, kind upstream.Kind, status int, body []byte, sse bool) (u upstream.Usage, ok bool, completion int) {
	if status == http.StatusOK && (sse || upstream.LooksLikeSSE(body)) {
		return k.FilterWhole(c, kind, body, func([]byte) error { return nil })
	}
	return k.AnswerUsage(c, kind, status, body)
}
