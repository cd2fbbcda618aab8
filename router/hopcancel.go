package router

import (
	"encoding/json"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/router/internal/cluster"
	"github.com/ringgate/ringgate/router/internal/hangup"
	"github.com/ringgate/ringgate/router/internal/reply"
)

// A client that hangs up while its request is on a hop (edge → owner) is
// seen by the edge only: the owner's client is the edge's pooled peer
// connection, which stays open. So the edge watches its client while it
// waits for the owner, and when the client is gone it tells the owner, in a
// signed POST naming the hop (its X-Ringgate-Hop value, unique by its
// nonce); the owner ends that call as if its own client had hung up: slot
// freed, tokens settled at the reservation, the answer dropped.

// cancelPath receives an edge's word that a hop's client is gone.
const cancelPath = "/_ringgate/cancel"

type cancelMsg struct {
	Hop string `json:"hop"` // the hop's X-Ringgate-Hop header
}

// hopWatches are the watches of hop calls waiting for their upstream, by
// hop header.
type hopWatches struct{ m sync.Map }

func (h *hopWatches) add(hop string, w *hangup.Watch) { h.m.Store(hop, w) }
func (h *hopWatches) remove(hop string)               { h.m.Delete(hop) }

// serveCancel ends the hop call named, if it still waits for its upstream.
func (r *Router) serveCancel(ctx *fasthttp.RequestCtx) {
	if _, ok := r.peerPost(ctx); !ok {
		return
	}
	var m cancelMsg
	if err := json.Unmarshal(ctx.PostBody(), &m); err != nil || m.Hop == "" {
		reply.Fail(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "invalid_json", "Malformed cancel.")
		return
	}
	if w, ok := r.watches.hops.m.Load(m.Hop); ok {
		w.(*hangup.Watch).Cancel()
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}

// watchHop watches the edge's client while the hop named hop waits at the
// owner; if the client hangs up, the owner is told. Its stop reports
// whether that happened.
func (r *Router) watchHop(ctx *fasthttp.RequestCtx, v *cluster.Lookup, owner, hop string) *hangup.Watch {
	addr := v.Addrs()[owner]
	return r.watch(ctx, func() {
		r.metrics.ClientGone.Inc()
		go func() {
			_, _, _ = r.peerCall(v, addr, owner, cancelPath, cancelMsg{Hop: hop}, 1, deltaTimeout)
		}()
	})
}

// hopGone answers on the edge for a client that hung up while its hop
// waited at the owner.
func (r *Router) hopGone(ctx *fasthttp.RequestCtx, w *hangup.Watch, owner string, resp *fasthttp.Response) {
	fasthttp.ReleaseResponse(resp)
	ctx.SetConnectionClose()
	reply.Fail(ctx, statusClientClosed, "invalid_request_error", "client_closed_request",
		"The client closed the connection before the upstream answered; the call was dropped.")
	gone, waited := w.Gone()
	r.log.Info("client_gone", "owner", owner, "gone_ms", gone.Milliseconds(), "waited_ms", waited.Milliseconds())
}
