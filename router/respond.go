package router

import (
	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/router/internal/reply"
)

// What the node writes back, the OpenAI error shape and the rate-limit
// headers, is package reply's; the handler calls it.

// setNodeHeader names this node in an answer (x-ringgate-node).
func (r *Router) setNodeHeader(h *fasthttp.ResponseHeader) {
	reply.SetNode(h, r.nodeName)
}
