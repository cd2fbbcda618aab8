package router

import (
	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/router/internal/hangup"
	"github.com/ringgate/ringgate/router/internal/reply"
	"github.com/ringgate/ringgate/upstream"
)

// A client that hangs up while its call waits for the upstream's answer
// headers is found gone by its watch (package hangup): the call is finished
// at once (slot freed, tokens settled at the reservation: the provider may
// bill the prompt, and we cannot know yet), and when Do returns its answer
// is dropped unwritten (an unread stream closes the upstream connection,
// which cuts the generation). A JSON answer, read whole, was generated all
// the same: the call is settled again on its usage (settleLate).
//
// A hop is watched the same way on the owner: its client is the edge's
// pooled connection, which the edge closes when it gives up on the call
// (its read timeout, a crash). An edge's own client hanging up is not seen
// through the hop (the edge waits in its own Do): the edge watches its
// client too and, when it is gone, tells the owner (hopcancel.go).

// hangups are the watches of calls waiting for their upstream: their
// clients' connections (list), and the hop calls among them by hop, for
// an edge's cancel (hopcancel.go).
type hangups struct {
	list hangup.List
	// callGone is r.callGone taking a *call as any: a watch made for
	// every request allocates no closure.
	callGone func(any)
	hops     hopWatches
}

// runFunc runs a func() given as any (a watch's onGone).
func runFunc(f any) { f.(func())() }

// watchClient starts watching ctx's connection for c (c.watch); on a
// connection with no socket to peek at the watch watches nothing.
func (r *Router) watchClient(ctx *fasthttp.RequestCtx, c *call) *hangup.Watch {
	c.watch = r.watches.list.Watch(ctx.Conn(), hangup.New(r.watches.callGone, c))
	return c.watch
}

// callGone finishes a call whose client is gone: settled at its
// reservation, the prompt counted exactly.
func (r *Router) callGone(c *call) {
	r.metrics.ClientGone.Inc()
	// The provider runs the call on until it answers: its budgets keep
	// the slot (freed now, a concurrency of 1 could run 2 calls at once)
	// until the handler hears the answer (clientGone). A
	// hop's cancel runs this too, while its handler waits in Do.
	c.providerHeld = c.bud.Held() || c.spill.b != nil
	r.finish(c, upstream.Usage{Prompt: r.tokens.ExactPrompt(c.counts()), Completion: c.res.Total - c.res.Prompt, Reported: true}, false, 0)
}

// watch watches ctx's connection and runs onGone once if the client hangs
// up before Stop. Without a socket to peek at it watches nothing, but
// Cancel still works (a hop's edge says its client is gone).
func (r *Router) watch(ctx *fasthttp.RequestCtx, onGone func()) *hangup.Watch {
	return r.watches.list.Watch(ctx.Conn(), hangup.New(runFunc, onGone))
}

// clientGone ends a call whose client hung up before the upstream answered:
// the answer (or the error) is dropped, and the connection closed after
// whatever fasthttp still tries to write on it.
func (r *Router) clientGone(ctx *fasthttp.RequestCtx, c *call, w *hangup.Watch, resp *fasthttp.Response, err error) {
	status := 0
	w.WaitFired()
	if err == nil {
		status = resp.StatusCode()
		r.metrics.Answered(c.prov.Name, status)
		r.learnProvider(c, &resp.Header, status)
		if body, sse, whole := reply.Dropped(resp); whole {
			// An answer read whole: the provider generated (and bills)
			// it for the client that left, and says how much.
			u, ok, completion := r.tokens.Late(c.counts(), c.prov.Kind, status, body, sse)
			r.settleLate(c, u, ok, completion)
		}
	}
	fasthttp.ReleaseResponse(resp) // an unread stream: closes the upstream connection
	// Then the provider's slot: the provider stops at its next write
	// (docs/limits.md).
	r.releaseHeld(c)
	ctx.SetConnectionClose()
	reply.Fail(ctx, statusClientClosed, "invalid_request_error", "client_closed_request",
		"The client closed the connection before the upstream answered; the call was dropped.")
	gone, waited := w.Gone()
	r.log.Info("client_gone", "tenant", c.t.Name, "upstream", c.prov.Name,
		"gone_ms", gone.Milliseconds(), "waited_ms", waited.Milliseconds(),
		"upstream_status", status, "upstream_error", errString(err))
}

// statusClientClosed is nginx's 499, "client closed request": written to a
// connection nobody reads, or to a client that half-closed it.
const statusClientClosed = 499
