package router

import (
	"bytes"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/upstream"
)

// A request its tenant's limits refuse on the tenant's owner waits in the
// tenant's line (package queue) for room, within its class's wait budget,
// instead of a bare 429: it is admitted the moment a call of the tenant
// ends (finish, a report applied: Kick) or a bucket leaves the window (the
// refusal's RetryAfter, a timer for the head of the line). The class is the
// tenant's priority, lowered to batch by x-ringgate-priority: batch. A
// request that finds others waiting joins the line without trying first. A
// client that hangs up while it waits leaves the line at once. A request
// whose tenant moves to another node while it waits goes there to be
// decided; one whose tenant spills is decided on the spill.

// priorityHeader lowers a request's class.
const priorityHeader = "x-ringgate-priority"

// classOf is the request's class: the tenant's, or batch when the request
// asks for it (never higher than the tenant's).
func classOf(t *tenant, h *fasthttp.RequestHeader) queue.Class {
	if t.priority == config.PriorityBatch || bytes.EqualFold(bytes.TrimSpace(h.Peek(priorityHeader)), []byte("batch")) {
		return queue.Batch
	}
	return queue.Interactive
}

// queueWait is how long a request of class may wait for t (0: it may not).
func (t *tenant) queueWait(c queue.Class) time.Duration { return t.waits[c] }

// refusalNow names what refuses a request that waited without its turn
// coming, from the limiter's view now, and when room is due.
func refusalNow(d limiter.Decision) limiter.Decision {
	switch {
	case d.LimitConcurrency > 0 && d.InFlight >= d.LimitConcurrency:
		d.Limited, d.RetryAfter = limiter.Concurrency, time.Second
	case d.LimitRequests > 0 && d.RemainingRequests <= 0:
		d.Limited, d.RetryAfter = limiter.Requests, d.ResetRequests
	case d.LimitTokens > 0:
		d.Limited, d.RetryAfter = limiter.Tokens, d.ResetTokens
	default:
		d.Limited, d.RetryAfter = limiter.Concurrency, time.Second
	}
	d.RetryAfter = max(d.RetryAfter, time.Millisecond)
	return d
}

// KickQueues tells the queues of the tenants named that their state
// changed (handed over: those waiting are decided by the new owner).
func (r *Router) KickQueues(names []string) {
	st := r.state.Load()
	for _, name := range names {
		if t := st.byName[name]; t != nil {
			t.queue.Kick()
		}
	}
}

// outcome is how a queued request's last try ended.
type outcome uint8

const (
	stillWaiting outcome = iota
	admitted
	refusedForGood // too large for the limit: waiting will not help
	refusedByBudget
	movedAway // handed over: decided by the new owner
	spilled   // sealed for a spill: decided on it
)

// admitQueued waits for room for c in its tenant's line and serves it once
// admitted. first is the refusal that sent it to the line (nil: it joined
// behind others without trying).
func (r *Router) admitQueued(ctx *fasthttp.RequestCtx, ep upstream.Endpoint, st *state, c *call, hops int, class queue.Class, first *limiter.Decision) bool {
	t := c.t
	var (
		last     limiter.Decision
		tried    bool
		out      outcome
		budget   lease.Decision
		budgetOn string
	)
	if first != nil {
		last, tried = *first, true
	}
	r.cancelBudgets(c) // each try takes them afresh
	try := func() (bool, time.Duration) {
		if bd, what, ok := r.takeBudgets(st, c); !ok {
			out, budget, budgetOn = refusedByBudget, bd, what
			return true, -1
		}
		tk, d := c.lim.Admit(r.clock(), int64(c.res.Total))
		switch {
		case d.Moved:
			r.cancelBudgets(c)
			out = movedAway
			if c.lim.MovedTo() == "" {
				out = spilled
			}
			return true, -1
		case d.Allowed:
			c.tk, last, tried, out = tk, d, true, admitted
			return true, 0
		}
		r.cancelBudgets(c)
		last, tried = d, true
		if d.TooLarge {
			out = refusedForGood
			return true, -1
		}
		if d.Limited == limiter.Concurrency {
			// A call's end Kicks the line; the second covers one that
			// ends where no Kick is heard (a report lost).
			return false, time.Second
		}
		return false, d.RetryAfter
	}
	gone := make(chan struct{})
	var once sync.Once
	w := r.watch(ctx, func() { once.Do(func() { close(gone) }) })
	hop := ""
	if hops > 0 {
		hop = string(ctx.Request.Header.Peek(hopHeader))
		r.hopCalls.add(hop, w) // the edge's client hanging up ends the wait too
	}
	waited, err := t.queue.Wait(class, st.cfg.Queue.MaxDepth, time.Now().Add(t.queueWait(class)), gone, try)
	if hop != "" {
		r.hopCalls.remove(hop)
	}
	w.stop()
	r.metrics.queueWaited.WithLabelValues(class.String()).Observe(waited.Seconds())
	ctx.Response.Header.Set("x-ringgate-queued-ms", strconv.FormatInt(waited.Milliseconds(), 10))
	switch {
	case errors.Is(err, queue.ErrCanceled):
		ctx.SetConnectionClose()
		fail(ctx, statusClientClosed, "invalid_request_error", "client_closed_request",
			"The client closed the connection while the request waited for capacity; it was not sent.")
		return false
	case err != nil:
		// Full, or the wait budget spent: refused with what the limiter
		// says of the room (when it frees).
		if !tried {
			last = refusalNow(c.lim.Peek(r.clock()))
		}
		setRateHeaders(&ctx.Response.Header, &last)
		t.counts.queue.Inc()
		refuse(ctx, &last, st.cfg.Limits.Window, int64(c.res.Total))
		return false
	}
	switch out {
	case movedAway:
		return r.movedOn(ctx, t, c.lim, hops)
	case spilled:
		return r.serveLocalOnce(ctx, ep, st, t, t.lim, hops, retrySpill)
	case refusedByBudget:
		d := c.lim.Peek(r.clock())
		setRateHeaders(&ctx.Response.Header, &d)
		t.counts.upstream.Inc()
		refuseBudget(ctx, &budget, budgetOn)
		return false
	case refusedForGood:
		setRateHeaders(&ctx.Response.Header, &last)
		t.counts.refused(last.Limited)
		refuse(ctx, &last, st.cfg.Limits.Window, int64(c.res.Total))
		return false
	}
	setRateHeaders(&ctx.Response.Header, &last)
	t.counts.allowed.Inc()
	t.counts.reserved.Add(float64(c.res.Total))
	return r.forward(ctx, c)
}
