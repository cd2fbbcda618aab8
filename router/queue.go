package router

import (
	"bytes"
	"errors"
	"net/textproto"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/admit"
	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/router/internal/hopsign"
	"github.com/ringgate/ringgate/router/internal/provider"
	"github.com/ringgate/ringgate/router/internal/reply"
	"github.com/ringgate/ringgate/router/internal/status"
	"github.com/ringgate/ringgate/router/internal/tenant"
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

// waiting reports whether any of qs has requests waiting.
func waiting(qs []*queue.Queue) bool {
	for _, q := range qs {
		if q.Waiting() > 0 {
			return true
		}
	}
	return false
}

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

// refusalNow names what refuses a request of tokens that waited without its
// turn coming, from the limiter's view now, and when room is due; with
// room for it, the limit the others ahead of it take as they are let in
// (concurrency first, then requests, then tokens: one that is set).
func refusalNow(d limiter.Decision, tokens int64) limiter.Decision {
	switch {
	case d.LimitConcurrency > 0 && d.InFlight >= d.LimitConcurrency:
		d.Limited, d.RetryAfter = limiter.Concurrency, time.Second
	case d.LimitRequests > 0 && d.RemainingRequests <= 0:
		d.Limited, d.RetryAfter = limiter.Requests, d.ResetRequests
	case d.LimitTokens > 0 && d.RemainingTokens < tokens:
		d.Limited, d.RetryAfter = limiter.Tokens, d.ResetTokens
	case d.LimitConcurrency <= 0 && d.LimitRequests > 0:
		// Behind others, where the limit is on requests: they take them.
		d.Limited, d.RetryAfter = limiter.Requests, max(d.ResetRequests, time.Second)
	case d.LimitConcurrency <= 0 && d.LimitTokens > 0:
		d.Limited, d.RetryAfter = limiter.Tokens, max(d.ResetTokens, time.Second)
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
		if t := st.ByName[name]; t != nil && t.Peek() != nil {
			t.Peek().Queue.Kick()
		}
	}
}

// outcome is how a queued request's last try ended.
type outcome uint8

const (
	stillWaiting outcome = iota
	admitted
	refusedForGood // too large for the limit, or room not due within the wait
	toTenantLine   // the provider's budgets have room, the tenant not: its line next
	toBudgetLine   // a provider's budget has no room, or a line: that line next
	toLevelLine    // a level of the tenant's limits has no room: its line next
	refusedByBudget
	spillEnded    // the tenant's spill ended, or is ending: decided the usual way
	fallbackEnded // the owner answers again: routed to it
	shadowed      // the tenant's limits, in shadow mode, refuse it: served uncharged
	reloaded      // the config changed: decided again on the new one
	movedAway     // handed over: decided by the new owner
	spilled       // sealed for a spill: decided on it
)

// mayWait reports whether a request refused can wait for room with left
// of its wait budget: a slot frees with a call's end; a window's room when
// the refusal says (retryAfter), which must come before the wait is over.
func mayWait(concurrency bool, retryAfter, left time.Duration) bool {
	return concurrency || retryAfter < left
}

// admitQueued waits for room for c and serves it once admitted. A request
// waits in one line at a time: its tenant's (on the tenant's owner, for
// the tenant's own limits), a level's of the tenant's limits (its model's,
// its team's: levelLine; shared fairly by a team's tenants) or a provider
// budget's (on any node, for the upstream's or model's limits, shared
// fairly among tenants: budgetFlow). Its try is the whole decision (decide),
// all or none; a try that finds another limit full moves the request to
// that limit's line, under one wait budget. first is the refusal that sent
// it to its tenant's line, or to the line of the level that refused it
// (c.refusedLevel); on, the budget whose line it starts in; with neither
// it joined the tenant's line behind others, or the line of level
// c.refusedLevel.
func (r *Router) admitQueued(ctx *fasthttp.RequestCtx, ep upstream.Endpoint, st *tenant.State, c *call, first *limiter.Decision, on *provider.Refusal) bool {
	w := r.newWaiter(st, c, first, on)
	r.cancelBudgets(c) // each try takes them afresh
	err := w.wait(ctx)
	r.metrics.QueueWaited.WithLabelValues(c.class.String()).Observe(w.waited.Seconds())
	ctx.Response.Header.Set("x-ringgate-queued-ms", strconv.FormatInt(w.waited.Milliseconds(), 10))
	if err != nil {
		return w.gaveUp(ctx, err)
	}
	return w.serve(ctx, ep)
}

// waiter is a request waiting in lines for room: where it waits, and how
// its last try ended.
type waiter struct {
	r  *Router
	st *tenant.State
	c  *call
	// tenantLine is where its tenant's refusals wait: its owner's, its
	// fallback share's, or, spilled, its spill's. waits: its tenant's
	// refusals are waited for (a spill's answer at once).
	tenantLine *queue.Queue
	waits      bool
	deadline   time.Time
	// guard is how long after a rate's room is due a refused head tries
	// again (rateRetry); notBefore is when, refused on requests.
	guard     time.Duration
	notBefore time.Time
	last      limiter.Decision // the tenant's (or a level's) last refusal, or its admission
	tried     bool             // last was said by a try
	out       outcome
	budget    provider.Refusal // the last budget refusal
	at        stage
	line      *queue.Queue
	flow      queue.Flow
	lvl       int             // at inLevelLine: the level's index in c.levels
	next      int             // toLevelLine: the level's index
	movedLim  *limiter.Tenant // the limiter handed over, for movedAway
	waited    time.Duration
}

func (r *Router) newWaiter(st *tenant.State, c *call, first *limiter.Decision, on *provider.Refusal) *waiter {
	t := c.t
	w := &waiter{r: r, st: st, c: c, at: inTenantLine, movedLim: c.lim,
		deadline: r.clk.Now().Add(t.QueueWait(c.class)),
		// A head refused by a rate tries again one bucket after the
		// room was due, not at its edge: requests let in the instant a
		// charge leaves the window would reach the provider packed at
		// its edge, and the provider counts them as they arrive, each
		// delayed a little differently on the way.
		guard: st.Cfg.Limits.Window / limiter.Buckets}
	w.tenantLine = t.LineFor(c.lim, c.hops)
	w.waits = w.tenantLine != nil
	if c.sp != nil {
		// A spill's refusal is final (it answers at once, as on the
		// spill's first try): a spilled call waits here only for the
		// provider's budgets, in its spill's line behind the others.
		w.tenantLine, w.waits = &c.sp.Line, false
	}
	if w.tenantLine == nil {
		w.tenantLine = t.Core().Queue // never waited in: its tenant's refusals are final
	}
	w.line = w.tenantLine
	if first != nil {
		w.last, w.tried = *first, true
	}
	switch {
	case on != nil:
		w.budget, w.at, w.line, w.flow = *on, stageOf(on.At), on.On.Queue(), c.budgetFlow(on)
	case c.refusedLevel > 0 && c.levelLine(c.refusedLevel-1) != nil:
		w.lvl = c.refusedLevel - 1
		w.at, w.line = inLevelLine, c.levelLine(w.lvl)
	}
	return w
}

// wait waits in line after line until a try ends the wait, the wait
// budget is spent, the line is full or the client hangs up.
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
	for {
		w.out = stillWaiting
		d, err := w.line.Wait(c.class, w.flow, w.st.Cfg.Queue.MaxDepth, w.deadline, gone, w.try)
		w.waited += d
		if err != nil || (w.out != toTenantLine && w.out != toBudgetLine && w.out != toLevelLine) {
			return err
		}
		switch w.out {
		case toTenantLine:
			w.at, w.line, w.flow = inTenantLine, w.tenantLine, queue.Flow{}
		case toLevelLine:
			w.at, w.lvl, w.line, w.flow = inLevelLine, w.next, c.levelLine(w.next), queue.Flow{}
		default:
			w.at, w.line, w.flow = stageOf(w.budget.At), w.budget.On.Queue(), c.budgetFlow(&w.budget)
		}
		w.notBefore = time.Time{}
	}
}

// try is one try at the head of its line: whether the wait ends, and if
// not, when to try again (and on a Kick).
func (w *waiter) try() (bool, time.Duration) {
	c := w.c
	c.refusedBy, c.refusedLevel = "", 0
	if out := w.overtaken(); out != stillWaiting {
		w.out = out
		return true, -1
	}
	if wait := w.r.clk.Until(w.notBefore); wait > 0 {
		return false, wait
	}
	if (w.at == inTenantLine || w.at == inLevelLine) && w.waits && c.sp == nil && !c.t.Shadow {
		// Its tenant and levels first: the head of their line waits
		// here for their room, not in a provider's line it would only
		// leave again when its turn came there.
		d := c.lim.Check(w.r.clock(), int64(c.res.Total))
		if !d.Allowed && !d.Moved {
			return w.tenantRefused(d)
		}
		if d = w.r.checkLevels(c, d); !d.Allowed && !d.Moved {
			return w.tenantRefused(d)
		}
	}
	c.at = w.at
	o := w.r.decide(c)
	switch {
	case o.Verdict == admit.Taken:
		w.last, _ = c.headers()
		w.out = shadowed // served uncharged, its budgets in hand
		if !o.Shadowed {
			w.tried, w.out = true, admitted
		}
		return true, 0
	case o.At == atProvider:
		return w.budgetRefused()
	case o.Verdict == admit.Behind:
		// Its tenant's own line has others waiting: behind them.
		w.out = toTenantLine
		return true, -1
	case o.Verdict == admit.Moved:
		w.out = w.moved(o.At)
		return true, -1
	}
	return w.tenantRefused(c.refusal())
}

// overtaken is what ends the wait before a try: the config reloaded, the
// tenant handed over, its fallback episode or its spill over.
func (w *waiter) overtaken() outcome {
	r, c, t := w.r, w.c, w.c.t
	switch {
	case r.state.Load() != w.st:
		return reloaded // its budgets and limits may be others now
	case c.lim == t.Core().Lim && c.lim.MovedTo() != "":
		return movedAway // handed over: its new owner decides
	case c.lim == t.Core().Fb.Made() && c.hops == 0 && r.fallbackOver(t):
		return fallbackEnded // the owner answers again, or is another: it decides
	case c.sp != nil && (r.spills.Node.Lapsed(c.sp) || c.sp.Budget.Fenced()):
		return spillEnded
	}
	return stillWaiting
}

// moved is where a try whose room moved (at) goes: its spill ended, a
// level or its tenant handed over, or its tenant's limiter sealed for a
// spill.
func (w *waiter) moved(at int) outcome {
	c := w.c
	switch {
	case c.sp != nil:
		return spillEnded
	case at == atLevels:
		w.movedLim = c.levels.Limiter(c.refusedLevel - 1)
		return movedAway
	case c.lim.MovedTo() == "":
		return spilled
	}
	return movedAway
}

// rateRetry is when a head refused on dim, with room due after, tries
// again: a bucket later. Refused on requests, no Kick brings it sooner (a
// call's end frees no request); on tokens a Kick may (a call settled
// below its reservation).
func (w *waiter) rateRetry(dim limiter.Dimension, after time.Duration) time.Duration {
	after += w.guard
	if dim == limiter.Requests {
		w.notBefore = w.r.clk.Now().Add(after)
	}
	return after
}

// tenantRefused is the try's answer when the tenant's limits, or a
// level's, refuse it (d); it holds no budget.
func (w *waiter) tenantRefused(d limiter.Decision) (bool, time.Duration) {
	c := w.c
	w.last, w.tried = d, true
	if d.TooLarge || !w.waits || !mayWait(d.Limited == limiter.Concurrency, d.RetryAfter, w.r.clk.Until(w.deadline)) {
		w.out = refusedForGood
		return true, -1
	}
	if i := c.refusedLevel - 1; i >= 0 && c.levelLine(i) != nil {
		// A level refused it: it waits in the level's line.
		if w.at != inLevelLine || w.lvl != i {
			w.out, w.next = toLevelLine, i
			return true, -1
		}
	} else if w.at != inTenantLine {
		w.out = toTenantLine
		return true, -1
	}
	if d.Limited == limiter.Concurrency {
		// A call's end Kicks the line; the second covers one that
		// ends where no Kick is heard (a report lost).
		return false, time.Second
	}
	return false, w.rateRetry(d.Limited, d.RetryAfter)
}

// budgetRefused is the try's answer when a provider's budget refuses it,
// or others wait in the budget's line.
func (w *waiter) budgetRefused() (bool, time.Duration) {
	br := w.c.bud.refusal
	w.budget = br
	switch {
	case !br.Waitable(w.r.clk.Until(w.deadline), mayWait):
		w.out = refusedByBudget
		return true, -1
	case stageOf(br.At) != w.at:
		w.out = toBudgetLine
		return true, -1
	case br.D.Limited == limiter.Concurrency:
		return false, br.D.RetryAfter // and a Kick when a slot frees
	case !br.D.Degraded:
		// Blocks: a grant Kicks the line when it brings room; the
		// timer's guard is enough.
		return false, br.D.RetryAfter + w.guard
	}
	return false, w.rateRetry(br.D.Limited, br.D.RetryAfter)
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
	case w.at != inTenantLine && w.at != inLevelLine:
		// Waiting for a provider's limit.
		return r.refusedByBudget(ctx, c, &w.budget, t.Counters().Queue)
	}
	// Refused with what the limiter says of the room (when it frees).
	if !w.tried {
		lim := c.lim
		if w.at == inLevelLine {
			lim, c.refusedBy = c.levels.Limiter(w.lvl), c.levels.Label(w.lvl)
		}
		w.last = refusalNow(lim.Peek(r.clock()), int64(c.res.Total))
	}
	reply.SetRateHeaders(&ctx.Response.Header, &w.last)
	t.Counters().Queue.Inc()
	reply.RefuseOn(ctx, &w.last, w.st.Cfg.Limits.Window, int64(c.res.Total), c.refusedBy)
	return false
}

// serve acts on the try that ended the wait: served, refused, or decided
// again where its tenant is now.
func (w *waiter) serve(ctx *fasthttp.RequestCtx, ep upstream.Endpoint) bool {
	r, c, t, st := w.r, w.c, w.c.t, w.st
	switch w.out {
	case reloaded:
		return r.redecideReloaded(ctx, ep, t, c.lim == t.Core().Lim, c.hops)
	case movedAway:
		// A request bounced back here by the node its tenant (or a
		// level) is frozen for takes it back, as outside a line
		// (tookBack), once: then it is decided here again.
		if c.again == firstTry && r.tookBack(ctx, c, w.movedLim, c.hops) {
			return r.serveLocalOnce(ctx, ep, st, t, c.lim, c.hops, retryLimiter)
		}
		return r.movedOn(ctx, t, w.movedLim, c.hops)
	case spilled:
		return r.serveLocalOnce(ctx, ep, st, t, t.Core().Lim, c.hops, retrySpill)
	case spillEnded:
		return r.redecideSpill(ctx, ep, st, c)
	case fallbackEnded:
		r.cancelBudgets(c)
		return r.serveAPI(ctx, ep)
	case refusedByBudget:
		return r.refusedByBudget(ctx, c, &w.budget, t.Counters().Upstream)
	case refusedForGood:
		reply.SetRateHeaders(&ctx.Response.Header, &w.last)
		t.Counters().Refused(w.last.Limited)
		reply.RefuseOn(ctx, &w.last, st.Cfg.Limits.Window, int64(c.res.Total), c.refusedBy)
		return false
	}
	return r.serveAdmitted(ctx, c, w.out == shadowed)
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
		return r.refuseZeroShare(ctx)
	}
	return r.serveLocalOnce(ctx, ep, st, nt, lim, hops, retrySpill)
}

// queueCollector exports, at scrape time, the depth of every tenant's
// queue on this node that has requests waiting: a series exists only
// while its tenant has a line, so idle tenants cost no series.
type queueCollector struct{ r *Router }

var tenantQueued = prometheus.NewDesc("ringgate_tenant_queued", "Requests waiting on this node in a tenant's queue, by class (only tenants with requests waiting).", []string{"tenant", "class"}, nil)

func (c queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- tenantQueued }

func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	for name, t := range c.r.state.Load().ByName {
		if t.Kind != tenant.KindTenant {
			continue // a level's waiters are its tenants' (OwnLines)
		}
		ls := t.OwnLines()
		if !waiting(ls) {
			continue
		}
		v := status.QueueOf(ls...)
		ch <- prometheus.MustNewConstMetric(tenantQueued, prometheus.GaugeValue, float64(v.Interactive.Waiting), name, queue.Interactive.String())
		ch <- prometheus.MustNewConstMetric(tenantQueued, prometheus.GaugeValue, float64(v.Batch.Waiting), name, queue.Batch.String())
	}
}
