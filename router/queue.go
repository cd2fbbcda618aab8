package router

import (
	"bytes"
	"errors"
	"net/textproto"
	"strconv"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/admit"
	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/router/internal/hopsign"
	"github.com/ringgate/ringgate/router/internal/provider"
	"github.com/ringgate/ringgate/router/internal/reply"
	"github.com/ringgate/ringgate/router/internal/tenant"
	"github.com/ringgate/ringgate/router/internal/wait"
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
const priorityHeader = hopsign.PriorityHeader

// classOf is the request's class: the tenant's, or batch when the request
// asks for it (never higher than the tenant's).
func classOf(t *tenant.Tenant, h *fasthttp.RequestHeader) queue.Class {
	if t.Priority == config.PriorityBatch {
		return queue.Batch
	}
	var v [1][]byte
	reply.FirstHeaders(h, priorityHeaders[:], v[:])
	if bytes.EqualFold(bytes.TrimSpace(v[0]), []byte("batch")) {
		return queue.Batch
	}
	return queue.Interactive
}

var priorityHeaders = [1][]byte{[]byte(textproto.CanonicalMIMEHeaderKey(priorityHeader))}

// fallbackOver reports whether the fallback episode a waiter on t's share
// belongs to is over: ended (the owner answered), or about another owner
// now (the ring changed: maybe this node).
func (r *Router) fallbackOver(t *tenant.Tenant) bool {
	if !t.Falling() {
		return true
	}
	return r.view.Load().Owner(t.Name) != t.Core().Fb.Owner()
}

// spillTooLarge reports whether c is larger than its spilled tenant's
// token limit: no block of the budget can ever hold it.
func spillTooLarge(t *tenant.Tenant, c *call) bool {
	return t.Limits.Tokens > 0 && int64(c.res.Total) > t.Limits.Tokens
}

// KickQueues tells the queues of the tenants named that their state
// changed (handed over: those waiting are decided by the new owner).
func (r *Router) KickQueues(names []string) {
	st := r.state.Load()
	for _, name := range names {
		if t := st.ByName[name]; t != nil && t.Peek() != nil {
			t.Peek().Queue.Kick()
		}
	}
}

// admitQueued waits for room for c and serves it once admitted. A request
// waits in one line at a time: its tenant's (on the tenant's owner, for
// the tenant's own limits), a level's of the tenant's limits (its model's,
// its team's: levelLine; shared fairly by a team's tenants) or a provider
// budget's (on any node, for the upstream's or model's limits, shared
// fairly among tenants: budgetFlow). Its try is the whole decision (decide),
// all or none; a try that finds another limit full moves the request to
// that limit's line, under one wait budget (package wait). first is the
// refusal that sent it to its tenant's line, or to the line of the level
// that refused it (c.refusedLevel); on, the budget whose line it starts
// in; with neither it joined the tenant's line behind others, or the line
// of level c.refusedLevel.
func (r *Router) admitQueued(ctx *fasthttp.RequestCtx, ep upstream.Endpoint, st *tenant.State, c *call, first *limiter.Decision, on *provider.Refusal) bool {
	w := r.newWaiter(st, c, first, on)
	r.cancelBudgets(c) // each try takes them afresh
	err := w.wait(ctx)
	r.metrics.QueueWaited.WithLabelValues(c.class.String()).Observe(w.Waited.Seconds())
	ctx.Response.Header.Set("x-ringgate-queued-ms", strconv.FormatInt(w.Waited.Milliseconds(), 10))
	if err != nil {
		return w.gaveUp(ctx, err)
	}
	return w.serve(ctx, ep)
}

// waiter is a request waiting in lines for room (wait.Waiter), and the
// call as its waiter sees it (wait.Call).
type waiter struct {
	*wait.Waiter
	r        *Router
	st       *tenant.State
	c        *call
	movedLim *limiter.Tenant // the limiter handed over, for wait.MovedAway
}

func (r *Router) newWaiter(st *tenant.State, c *call, first *limiter.Decision, on *provider.Refusal) *waiter {
	t := c.t
	w := &waiter{r: r, st: st, c: c, movedLim: c.lim}
	l := wait.Lines{Own: t.LineFor(c.lim, c.hops), Tenant: t.Core().Queue, Level: c.levelLine, Flow: c.budgetFlow}
	if c.sp != nil {
		l.Spill = &c.sp.Line
	}
	w.Waiter = wait.New(w, wait.Config{Clock: r.clk, Class: c.class, Wait: t.QueueWait(c.class),
		MaxDepth: st.Cfg.Queue.MaxDepth, Window: st.Cfg.Limits.Window, Shadow: t.Shadow, Lines: l},
		first, on, c.refusedLevel)
	return w
}

// wait waits in line after line (wait.Waiter.Wait) until a try ends the
// wait, the wait budget is spent, the line is full or the client hangs up:
// its watch closes the channel the waiter hears that on.
func (w *waiter) wait(ctx *fasthttp.RequestCtx) error {
	r, c := w.r, w.c
	gone := make(chan struct{})
	var once sync.Once
	hw := r.watch(ctx, func() { once.Do(func() { close(gone) }) })
	hop := ""
	if c.hops > 0 {
		hop = string(ctx.Request.Header.Peek(hopHeader))
		r.watches.hops.add(hop, hw) // the edge's client hanging up ends the wait too
	}
	defer func() {
		if hop != "" {
			r.watches.hops.remove(hop)
		}
		hw.Stop()
	}()
	return w.Wait(gone)
}

// Overtaken is what ends the wait before a try: the config reloaded, the
// tenant handed over, its fallback episode or its spill over. Asked first
// in every try, it forgets the level that refused the last one.
func (w *waiter) Overtaken() wait.Outcome {
	r, c, t := w.r, w.c, w.c.t
	c.refusedBy, c.refusedLevel = "", 0
	switch {
	case r.state.Load() != w.st:
		return wait.Reloaded // its budgets and limits may be others now
	case c.lim == t.Core().Lim && c.lim.MovedTo() != "":
		return wait.MovedAway // handed over: its new owner decides
	case c.lim == t.Core().Fb.Made() && c.hops == 0 && r.fallbackOver(t):
		return wait.FallbackEnded // the owner answers again, or is another: it decides
	case c.sp != nil && (r.spills.Node.Lapsed(c.sp) || c.sp.Budget.Fenced()):
		return wait.SpillEnded
	}
	return wait.StillWaiting
}

// Check is the tenant's limits, then its levels' (checkLevels), asked
// without charging.
func (w *waiter) Check() (limiter.Decision, int) {
	c := w.c
	d := c.lim.Check(w.r.clock(), int64(c.res.Total))
	if !d.Allowed && !d.Moved {
		return d, 0
	}
	d = w.r.checkLevels(c, d) // names the level that refuses: read after it
	return d, c.refusedLevel
}

// Decide is the call's one decision (decide), made from at, as its waiter
// reads it.
func (w *waiter) Decide(at wait.Stage) wait.Try {
	c := w.c
	c.at = at
	o := w.r.decide(c)
	switch {
	case o.Verdict == admit.Taken:
		t := wait.Try{Out: wait.Shadowed} // served uncharged, its budgets in hand
		t.D, _ = c.headers()
		if !o.Shadowed {
			t.Out = wait.Admitted
		}
		return t
	case o.At == atProvider:
		return wait.Try{Budget: &c.bud.refusal}
	case o.Verdict == admit.Behind:
		// Its tenant's own line has others waiting: behind them.
		return wait.Try{Out: wait.ToTenantLine}
	case o.Verdict == admit.Moved:
		return wait.Try{Out: w.moved(o.At)}
	}
	return wait.Try{D: c.refusal(), Level: c.refusedLevel}
}

// moved is where a try whose room moved (at) goes: its spill ended, a
// level or its tenant handed over, or its tenant's limiter sealed for a
// spill.
func (w *waiter) moved(at int) wait.Outcome {
	c := w.c
	switch {
	case c.sp != nil:
		return wait.SpillEnded
	case at == atLevels:
		w.movedLim = c.levels.Limiter(c.refusedLevel - 1)
		return wait.MovedAway
	case c.lim.MovedTo() == "":
		return wait.Spilled
	}
	return wait.MovedAway
}

// gaveUp answers a request whose wait ended without its turn: the client
// gone, the line full, or the wait budget spent.
func (w *waiter) gaveUp(ctx *fasthttp.RequestCtx, err error) bool {
	r, c, t := w.r, w.c, w.c.t
	switch {
	case errors.Is(err, queue.ErrCanceled):
		ctx.SetConnectionClose()
		reply.Fail(ctx, statusClientClosed, "invalid_request_error", "client_closed_request",
			"The client closed the connection while the request waited for capacity; it was not sent.")
		return false
	case w.At != wait.InTenantLine && w.At != wait.InLevelLine:
		// Waiting for a provider's limit.
		return r.refusedByBudget(ctx, c, &w.Budget, t.Counters().Queue)
	}
	// Refused with what the limiter says of the room (when it frees).
	if !w.Tried {
		lim := c.lim
		if w.At == wait.InLevelLine {
			lim, c.refusedBy, c.refusedLevel = c.levels.Limiter(w.Level), c.levels.Label(w.Level), w.Level+1
		}
		w.Last = wait.RefusalNow(lim.Peek(r.clock()), int64(c.res.Total))
	}
	reply.SetRateHeaders(&ctx.Response.Header, &w.Last)
	t.Counters().Queue.Inc()
	return r.refuseOn(ctx, c, &w.Last, w.st)
}

// serve acts on the try that ended the wait: served, refused, or decided
// again where its tenant is now.
func (w *waiter) serve(ctx *fasthttp.RequestCtx, ep upstream.Endpoint) bool {
	r, c, t, st := w.r, w.c, w.c.t, w.st
	switch w.Out {
	case wait.Reloaded:
		return r.redecideReloaded(ctx, ep, t, c.lim == t.Core().Lim, c.hops)
	case wait.MovedAway:
		// A request bounced back here by the node its tenant (or a
		// level) is frozen for takes it back, as outside a line
		// (tookBack), once: then it is decided here again.
		if c.again == firstTry && r.tookBack(ctx, c, w.movedLim, c.hops) {
			return r.serveLocalOnce(ctx, ep, st, t, c.lim, c.hops, retryLimiter)
		}
		return r.movedOn(ctx, t, w.movedLim, c.hops)
	case wait.Spilled:
		return r.serveLocalOnce(ctx, ep, st, t, t.Core().Lim, c.hops, retrySpill)
	case wait.SpillEnded:
		return r.redecideSpill(ctx, ep, st, c)
	case wait.FallbackEnded:
		r.cancelBudgets(c)
		return r.serveAPI(ctx, ep)
	case wait.RefusedByBudget:
		return r.refusedByBudget(ctx, c, &w.Budget, t.Counters().Upstream)
	case wait.RefusedForGood:
		reply.SetRateHeaders(&ctx.Response.Header, &w.Last)
		t.Counters().Refused(w.Last.Limited)
		return r.refuseOn(ctx, c, &w.Last, st)
	}
	return r.serveAdmitted(ctx, c, w.Out == wait.Shadowed)
}

// redecideReloaded decides again, on the config in force, a request that
// waited while a reload changed it (its tenant's limits, its provider's
// budgets may be others): on the tenant's limiter where it was on it,
// else routed afresh.
func (r *Router) redecideReloaded(ctx *fasthttp.RequestCtx, ep upstream.Endpoint, t *tenant.Tenant, owned bool, hops int) bool {
	st := r.state.Load()
	nt := st.ByName[t.Name]
	if nt == nil {
		// Its name is gone; its key may belong to another tenant now (a
		// rename): the request goes on as that one's, routed afresh,
		// not refused 401 with a valid key.
		if nt = authenticate(st, &ctx.Request.Header); nt == nil {
			reply.Fail(ctx, fasthttp.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
				"The tenant of this API key was removed by a config reload while the request waited.")
			return false
		}
		if hops == 0 {
			return r.serveAPI(ctx, ep)
		}
		owned = false // on the hop's limiter: the owner's, if this node owns the new name
	}
	switch {
	case owned:
		return r.serveLocalOnce(ctx, ep, st, nt, nt.Core().Lim, hops, retrySpill)
	case hops == 0:
		return r.serveAPI(ctx, ep)
	}
	lim, open := r.hopLimiter(nt)
	if !open {
		return r.refuseZeroShare(ctx, nt)
	}
	return r.serveLocalOnce(ctx, ep, st, nt, lim, hops, retrySpill)
}
