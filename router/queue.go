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

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/router/internal/hopsign"
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
func classOf(t *tenant, h *fasthttp.RequestHeader) queue.Class {
	if t.priority == config.PriorityBatch {
		return queue.Batch
	}
	var v [1][]byte
	firstHeaders(h, priorityHeaders[:], v[:])
	if bytes.EqualFold(bytes.TrimSpace(v[0]), []byte("batch")) {
		return queue.Batch
	}
	return queue.Interactive
}

var priorityHeaders = [1][]byte{[]byte(textproto.CanonicalMIMEHeaderKey(priorityHeader))}

// ownLines are the lines on this node where t's requests wait for its own
// limits: its owner's, its fallback share's, its spill's, and its model
// limits' (levelLine).
func (t *tenant) ownLines() []*queue.Queue {
	c := t.peek()
	if c == nil {
		return nil // never served here: no line
	}
	ls := []*queue.Queue{c.queue, c.fbQueue}
	if sp := c.spill.Load(); sp != nil {
		ls = append(ls, &sp.line)
	}
	for _, e := range t.models {
		if ec := e.peek(); ec != nil {
			ls = append(ls, ec.queue, ec.fbQueue)
		}
	}
	return ls
}

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
func (r *Router) fallbackOver(t *tenant) bool {
	if !t.falling() {
		return true
	}
	t.c().fb.mu.Lock()
	owner := t.c().fb.owner
	t.c().fb.mu.Unlock()
	return r.view.Load().owner(t.name) != owner
}

// spillTooLarge reports whether c is larger than its spilled tenant's
// token limit: no block of the budget can ever hold it.
func spillTooLarge(t *tenant, c *call) bool {
	return t.limits.Tokens > 0 && int64(c.res.Total) > t.limits.Tokens
}

// lineFor is the line where a request decided on lim waits for the
// tenant's own limits: its owner's, or an edge's fallback share's (for its
// own clients' requests; a hop decided on a share is not kept waiting);
// nil: none (a spill has its own, admitSpilled).
func (t *tenant) lineFor(lim *limiter.Tenant, hops int) *queue.Queue {
	switch {
	case lim == t.c().lim:
		return t.c().queue
	case lim == t.c().fb.made() && hops == 0:
		return t.c().fbQueue
	}
	return nil
}

// queueWait is how long a request of class may wait for t (0: it may not).
func (t *tenant) queueWait(c queue.Class) time.Duration { return t.waits[c] }

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
		if t := st.byName[name]; t != nil && t.peek() != nil {
			t.peek().queue.Kick()
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

// mayWait reports whether a request refused with d can wait for room
// until deadline: a slot frees with a call's end; a window's room when the
// refusal says, which must come before the wait is over.
func mayWait(concurrency bool, retryAfter time.Duration, deadline time.Time) bool {
	return concurrency || time.Now().Add(retryAfter).Before(deadline)
}

// admitQueued waits for room for c and serves it once admitted. A request
// waits in one line at a time: its tenant's (on the tenant's owner, for
// the tenant's own limits), a level's of the tenant's limits (its model's,
// its team's: levelLine; shared fairly by a team's tenants) or a provider
// budget's (on any node, for the upstream's or model's limits, shared
// fairly among tenants: flowOf). Its try is the whole decision, budgets
// then tenant and levels, all or none; a try that finds another limit full
// moves the request to that limit's line, under one wait budget. first is
// the refusal that sent it to its tenant's line, or to the line of the
// level that refused it (c.refusedLevel); on, the budget whose line it
// starts in; with neither it joined the tenant's line behind others, or
// the line of level c.refusedLevel.
func (r *Router) admitQueued(ctx *fasthttp.RequestCtx, ep upstream.Endpoint, st *state, c *call, hops int, class queue.Class, first *limiter.Decision, on *budgetRefusal) bool {
	t := c.t
	owned := c.lim == t.c().lim
	// The tenant's own line: on its owner, or on this node's fallback
	// share, or, spilled, the spill's on this node.
	tenantLine := t.lineFor(c.lim, hops)
	waits := tenantLine != nil // its tenant's refusals are waited for here
	if c.sp != nil {
		// A spill's refusal is final (it answers at once, as on the
		// spill's first try): a spilled call waits here only for the
		// provider's budgets, in its spill's line behind the others.
		tenantLine, waits = &c.sp.line, false
	}
	if tenantLine == nil {
		tenantLine = t.c().queue // never waited in: its tenant's refusals are final
	}
	deadline := time.Now().Add(t.queueWait(class))
	var (
		last   limiter.Decision
		tried  bool
		out    outcome
		budget budgetRefusal // the last budget refusal
		at     = inTenantLine
		line   = tenantLine
		flow   queue.Flow
		lvl    int // at inLevelLine: the level's index in c.levels
		next   int // toLevelLine: the level's index
	)
	if first != nil {
		last, tried = *first, true
	}
	switch {
	case on != nil:
		budget, at, line, flow = *on, on.stage, on.on.line, on.on.flowOf(c, on.d.Limited)
	case c.refusedLevel > 0 && c.levelLine(c.refusedLevel-1) != nil:
		lvl = c.refusedLevel - 1
		at, line = inLevelLine, c.levelLine(lvl)
	}
	// A head refused by a rate tries again one bucket after the room was
	// due, not at its edge: requests let in the instant a charge leaves
	// the window would reach the provider packed at its edge, and the
	// provider counts them as they arrive, each delayed a little
	// differently on the way. Refused on requests, no Kick brings it
	// sooner (a call's end frees no request); on tokens a Kick may (a
	// call settled below its reservation).
	guard := st.cfg.Limits.Window / limiter.Buckets
	var notBefore time.Time
	rateRetry := func(dim limiter.Dimension, after time.Duration) time.Duration {
		after += guard
		if dim == limiter.Requests {
			notBefore = time.Now().Add(after)
		}
		return after
	}
	// tenantRefused is the try's answer when the tenant's limits refuse it
	// (d); it holds no budget.
	tenantRefused := func(d limiter.Decision) (bool, time.Duration) {
		last, tried = d, true
		if d.TooLarge || !waits || !mayWait(d.Limited == limiter.Concurrency, d.RetryAfter, deadline) {
			out = refusedForGood
			return true, -1
		}
		if i := c.refusedLevel - 1; i >= 0 && c.levelLine(i) != nil {
			// A level refused it: it waits in the level's line.
			if at != inLevelLine || lvl != i {
				out, next = toLevelLine, i
				return true, -1
			}
		} else if at != inTenantLine {
			out = toTenantLine
			return true, -1
		}
		if d.Limited == limiter.Concurrency {
			// A call's end Kicks the line; the second covers one that
			// ends where no Kick is heard (a report lost).
			return false, time.Second
		}
		return false, rateRetry(d.Limited, d.RetryAfter)
	}
	// spillTry is the tenant's part of a try for a spilled tenant: its
	// spill's budget, in the ledger once admitted, as admitSpilled does;
	// the provider's budgets are taken.
	spillTry := func() (bool, time.Duration) {
		sp := c.sp
		if at != inTenantLine && sp.line.Waiting() > 0 {
			r.cancelBudgets(c)
			out = toTenantLine
			return true, -1
		}
		sp.mu.RLock()
		if r.lapsed(sp) {
			sp.mu.RUnlock()
			out = spillEnded
			return true, -1
		}
		bd := r.takeSpill(sp, c, true)
		if !bd.Allowed && t.shadow {
			sp.mu.RUnlock()
			last, out = spillDecision(t, &bd, st.cfg.Limits.Window), shadowed
			return true, 0
		}
		if !bd.Allowed {
			sp.mu.RUnlock()
			r.cancelBudgets(c)
			if sp.budget.Fenced() {
				out = spillEnded
				return true, -1
			}
			d := spillDecision(t, &bd, st.cfg.Limits.Window)
			d.TooLarge = spillTooLarge(t, c)
			return tenantRefused(d)
		}
		c.tk, _ = c.lim.Admit(r.clock(), int64(c.res.Total)) // the mirror: no limits
		c.fb = r.fallbackAdmitted(t, &c.tk, sp.epoch)
		sp.mu.RUnlock()
		last, tried, out = spillDecision(t, &bd, st.cfg.Limits.Window), true, admitted
		return true, 0
	}
	r.cancelBudgets(c) // each try takes them afresh
	movedLim := c.lim  // the limiter handed over, for movedAway
	try := func() (bool, time.Duration) {
		c.refusedBy, c.refusedLevel = "", 0
		switch {
		case r.state.Load() != st:
			// Reloaded: its budgets and limits may be others now.
			out = reloaded
			return true, -1
		case owned && c.lim.MovedTo() != "":
			out = movedAway // handed over: its new owner decides
			return true, -1
		case c.lim == t.c().fb.made() && hops == 0 && r.fallbackOver(t):
			out = fallbackEnded // the owner answers again, or is another: it decides
			return true, -1
		case c.sp != nil && (r.lapsed(c.sp) || c.sp.budget.Fenced()):
			out = spillEnded
			return true, -1
		}
		if wait := time.Until(notBefore); wait > 0 {
			return false, wait
		}
		if (at == inTenantLine || at == inLevelLine) && waits && c.sp == nil && !t.shadow {
			// Its tenant and levels first: the head of their line
			// waits here for their room, not in a provider's line it
			// would only leave again when its turn came there.
			d := c.lim.Check(r.clock(), int64(c.res.Total))
			if !d.Allowed && !d.Moved {
				return tenantRefused(d)
			}
			if d = r.checkLevels(c, d); !d.Allowed && !d.Moved {
				return tenantRefused(d)
			}
		}
		if br, ok := r.takeBudgets(st, c, at); !ok {
			budget = br
			if !br.waitable(deadline) {
				out = refusedByBudget
				return true, -1
			}
			if br.stage == at {
				if br.d.Limited == limiter.Concurrency {
					return false, br.d.RetryAfter // and a Kick when a slot frees
				}
				if !br.d.Degraded {
					// Blocks: a grant Kicks the line when it brings
					// room; the timer's guard is enough.
					return false, br.d.RetryAfter + guard
				}
				return false, rateRetry(br.d.Limited, br.d.RetryAfter)
			}
			out = toBudgetLine
			return true, -1
		}
		if c.sp != nil {
			return spillTry()
		}
		if waits && at != inTenantLine && at != inLevelLine && tenantLine.Waiting() > 0 {
			// The tenant's own line has others waiting: behind them.
			// (From a level's line it goes on: it left the tenant's
			// line for the level, its turn there had come.)
			r.cancelBudgets(c)
			out = toTenantLine
			return true, -1
		}
		tk, d := r.admitOn(c.lim, owned, r.clock(), int64(c.res.Total))
		if d.Allowed || (t.shadow && !d.Moved) {
			c.tk = tk // its levels next: all or none
			if ok, ld, moved := r.admitLevels(c, &d); !ok {
				r.cancelBudgets(c)
				if ld.Moved {
					movedLim, out = moved, movedAway
					return true, -1
				}
				return tenantRefused(ld)
			}
		}
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
		case t.shadow:
			last, out = d, shadowed // served uncharged, its budgets in hand
			return true, 0
		}
		r.cancelBudgets(c)
		return tenantRefused(d)
	}
	gone := make(chan struct{})
	var once sync.Once
	w := r.watch(ctx, func() { once.Do(func() { close(gone) }) })
	hop := ""
	if hops > 0 {
		hop = string(ctx.Request.Header.Peek(hopHeader))
		r.hopCalls.add(hop, w) // the edge's client hanging up ends the wait too
	}
	var waited time.Duration
	var err error
	for {
		var d time.Duration
		out = stillWaiting
		d, err = line.Wait(class, flow, st.cfg.Queue.MaxDepth, deadline, gone, try)
		waited += d
		if err != nil || (out != toTenantLine && out != toBudgetLine && out != toLevelLine) {
			break
		}
		switch out {
		case toTenantLine:
			at, line, flow = inTenantLine, tenantLine, queue.Flow{}
		case toLevelLine:
			at, lvl, line, flow = inLevelLine, next, c.levelLine(next), queue.Flow{}
		default:
			at, line, flow = budget.stage, budget.on.line, budget.on.flowOf(c, budget.d.Limited)
		}
		notBefore = time.Time{}
	}
	if hop != "" {
		r.hopCalls.remove(hop)
	}
	w.Stop()
	r.metrics.queueWaited.WithLabelValues(class.String()).Observe(waited.Seconds())
	ctx.Response.Header.Set("x-ringgate-queued-ms", strconv.FormatInt(waited.Milliseconds(), 10))
	switch {
	case errors.Is(err, queue.ErrCanceled):
		ctx.SetConnectionClose()
		fail(ctx, statusClientClosed, "invalid_request_error", "client_closed_request",
			"The client closed the connection while the request waited for capacity; it was not sent.")
		return false
	case err != nil && at != inTenantLine && at != inLevelLine:
		// Full, or the wait budget spent, waiting for a provider's limit.
		d := c.lim.Peek(r.clock())
		setRateHeaders(&ctx.Response.Header, &d)
		t.counters().queue.Inc()
		refuseBudget(ctx, &budget.d, budget.on.what)
		return false
	case err != nil:
		// Full, or the wait budget spent: refused with what the limiter
		// says of the room (when it frees).
		if !tried {
			lim := c.lim
			if at == inLevelLine {
				l := &c.levels[lvl]
				lim, c.refusedBy = l.lim, l.e.label
			}
			last = refusalNow(lim.Peek(r.clock()), int64(c.res.Total))
		}
		setRateHeaders(&ctx.Response.Header, &last)
		t.counters().queue.Inc()
		refuseOn(ctx, &last, st.cfg.Limits.Window, int64(c.res.Total), c.refusedBy)
		return false
	}
	switch out {
	case reloaded:
		return r.redecideReloaded(ctx, ep, t, owned, hops)
	case movedAway:
		// A request bounced back here by the node its tenant (or a
		// level) is frozen for takes it back, as outside a line
		// (tookBack), once: then it is decided here again.
		if c.again == firstTry && r.tookBack(ctx, c, movedLim, hops) {
			return r.serveLocalOnce(ctx, ep, st, t, c.lim, hops, retryLimiter)
		}
		return r.movedOn(ctx, t, movedLim, hops)
	case spilled:
		return r.serveLocalOnce(ctx, ep, st, t, t.c().lim, hops, retrySpill)
	case spillEnded:
		return r.redecideSpill(ctx, ep, st, c, hops)
	case fallbackEnded:
		r.cancelBudgets(c)
		return r.serveAPI(ctx, ep)
	case shadowed:
		r.shadowRefused(ctx, t, &last)
		r.levelsShadowed(ctx, c)
		r.levelsAdmitted(c)
		return r.forward(ctx, c)
	case refusedByBudget:
		d := c.lim.Peek(r.clock())
		setRateHeaders(&ctx.Response.Header, &d)
		t.counters().upstream.Inc()
		refuseBudget(ctx, &budget.d, budget.on.what)
		return false
	case refusedForGood:
		setRateHeaders(&ctx.Response.Header, &last)
		t.counters().refused(last.Limited)
		refuseOn(ctx, &last, st.cfg.Limits.Window, int64(c.res.Total), c.refusedBy)
		return false
	}
	setRateHeaders(&ctx.Response.Header, &last)
	r.admitted(c)
	if c.lim == t.c().fb.made() {
		c.fb = r.fallbackAdmitted(t, &c.tk, 0)
	}
	r.levelsShadowed(ctx, c)
	r.levelsAdmitted(c)
	return r.forward(ctx, c)
}

// redecideReloaded decides again, on the config in force, a request that
// waited while a reload changed it (its tenant's limits, its provider's
// budgets may be others): on the tenant's limiter where it was on it,
// else routed afresh.
func (r *Router) redecideReloaded(ctx *fasthttp.RequestCtx, ep upstream.Endpoint, t *tenant, owned bool, hops int) bool {
	st := r.state.Load()
	nt := st.byName[t.name]
	if nt == nil {
		// Its name is gone; its key may belong to another tenant now (a
		// rename): the request goes on as that one's, routed afresh,
		// not refused 401 with a valid key.
		if nt = st.authenticate(&ctx.Request.Header); nt == nil {
			fail(ctx, fasthttp.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
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
		return r.serveLocalOnce(ctx, ep, st, nt, nt.c().lim, hops, retrySpill)
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
	for name, t := range c.r.state.Load().byName {
		if t.kind != kindTenant {
			continue // a level's waiters are its tenants' (ownLines)
		}
		ls := t.ownLines()
		if !waiting(ls) {
			continue
		}
		v := viewQueue(ls...)
		ch <- prometheus.MustNewConstMetric(tenantQueued, prometheus.GaugeValue, float64(v.Interactive.Waiting), name, queue.Interactive.String())
		ch <- prometheus.MustNewConstMetric(tenantQueued, prometheus.GaugeValue, float64(v.Batch.Waiting), name, queue.Batch.String())
	}
}
