package router

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/admit"
	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/reserve"
	"github.com/ringgate/ringgate/router/internal/away"
	"github.com/ringgate/ringgate/router/internal/cluster"
	"github.com/ringgate/ringgate/router/internal/hangup"
	"github.com/ringgate/ringgate/router/internal/hopsign"
	"github.com/ringgate/ringgate/router/internal/levels"
	"github.com/ringgate/ringgate/router/internal/provider"
	"github.com/ringgate/ringgate/router/internal/reply"
	"github.com/ringgate/ringgate/router/internal/reqlog"
	"github.com/ringgate/ringgate/router/internal/spill"
	"github.com/ringgate/ringgate/router/internal/tenant"
	"github.com/ringgate/ringgate/router/internal/usage"
	"github.com/ringgate/ringgate/router/internal/wait"
	"github.com/ringgate/ringgate/upstream"
)

// call is one request on its way through its decision, the upstream and
// back.
type call struct {
	r    *Router // its rooms reach the node through it (rooms.go)
	t    *tenant.Tenant
	lim  *limiter.Tenant // the owner's limiter, the fallback share, or a spill's mirror
	fb   *away.Entry     // admitted under the fallback share: its ledger entry
	prov *upstream.Provider
	req  upstream.Request
	res  reserve.Reservation
	tk   limiter.Ticket
	// d is what its tenant's room (or its spill's) said of it, for the
	// rate-limit headers, which its levels then tighten (serveAdmitted).
	d    limiter.Decision
	hops int // > 0: a hop from an edge, which may cancel it (hopcancel.go)
	// class is its band: in its tenant's line, and in the budgets'
	// division (leaseFlow). at is where it waits (wait.NotQueued: its first
	// try), which its rooms read.
	class queue.Class
	at    wait.Stage
	// again: the call is a request decided again (serveLocalOnce), which
	// takes nothing back a second time (tookBack).
	again retry
	bud   provHold
	// levels: what the call holds of its tenant's other levels of
	// limits, its model's and its team's (package levels); refusedBy
	// names the level that refused it, refusedLevel is 1 + its index in
	// levels (0: none; in admitQueued, the level whose line it joins).
	levels       levels.Set
	refusedBy    string
	refusedLevel int
	// prompt: how its prompt was estimated (package usage).
	prompt usage.Prompt
	// spill: what the call took of its tenant's spillover budget
	// (package spill); sp the spill it was admitted on.
	spill budgetTake
	sp    *spill.Spill
	// finished: the call was settled and its slot freed. Set once, by
	// the first finish: a client found gone (hangup.go) finishes it from
	// its watch while the handler still waits for the upstream.
	finished atomic.Bool
	// watch: the hang-up watch of its client while it waits for the
	// upstream (hangup.go). Its own allocation, not part of the call: the
	// ticking goroutine may still hold it after the call is recycled
	// (recycle).
	watch *hangup.Watch
	// settled: the tokens its first settlement charged, which a second
	// (settleLate) corrects. providerHeld: finished while the provider
	// still runs it (its client gone): its provider budgets keep their
	// slot and charge until the answer (or the error) comes.
	settled      int64
	providerHeld bool
	acc          *reqlog.Access // its access line; nil when off
}

// provHold is what a call holds of its provider's budgets (package
// provider), and why they did not take it, when they did not.
type provHold struct {
	provider.Hold
	refusal provider.Refusal
}

// serveAPI handles a client API request: a hop from a peer is checked and
// enforced here; a client request goes to the tenant's owner, or is enforced
// here when this node owns the tenant (or, with the owner unreachable, under
// this node's strict share). It reports true when a stream took over the
// response; the stream then calls r.done itself.
func (r *Router) serveAPI(ctx *fasthttp.RequestCtx, ep upstream.Endpoint) bool {
	st := r.state.Load()
	var hv [2][]byte
	reply.FirstHeaders(&ctx.Request.Header, hopHeaders[:], hv[:])
	hop := len(hv[0]) > 0 || len(hv[1]) > 0
	hops := 0
	if hop {
		info, err := r.hops.Verify(&ctx.Request, r.node)
		hops = info.Hops
		if err != nil {
			r.metrics.HopsRefused.Inc()
			r.log.Warn("hop_refused", "remote", ctx.RemoteAddr().String(), "error", err.Error())
			// Marked, so that the edge knows nothing was admitted and
			// does not pass the 401 on to its client (wake.go).
			ctx.Response.Header.Set(hopsign.RefusedHeader, hopsign.Reason(err))
			reply.Fail(ctx, fasthttp.StatusUnauthorized, "invalid_request_error", "invalid_peer_signature",
				"Peer request refused: "+err.Error()+".")
			return false
		}
	}
	t := authenticate(st, &ctx.Request.Header)
	if t == nil {
		r.tell.SetNode(&ctx.Response.Header)
		reply.Fail(ctx, fasthttp.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
			"Missing or unknown API key. Send it as 'Authorization: Bearer <key>'.")
		return false
	}
	reqlog.Call(ctx, t.Name, "") // an edge's access line names the tenant it hands on
	if r.catchingUp() {
		// Woken from a pause: no decision on the ring it had (wake.go).
		return r.refuseCatchingUp(ctx, hop)
	}
	v := r.view.Load()
	owner := v.Owner(t.Name)
	if hop {
		// A hop is enforced here whatever this node's ring says (hop limit
		// 1), but on state that counts: see hopLimiter.
		lim, open := r.hopLimiter(t)
		if !open {
			return r.refuseZeroShare(ctx, t)
		}
		return r.serveLocal(ctx, ep, st, t, lim, hops)
	}
	if r.clustered && (v == nil || v.Ring().Len() == 0) {
		return r.refuseNotJoined(ctx)
	}
	if owner == "" || owner == r.node {
		return r.serveLocal(ctx, ep, st, t, t.Core().Lim, 0)
	}
	if sp := r.spills.Edge(t, owner); sp != nil {
		// A hot tenant: served here on its leased budget (package spill).
		return r.serveLocal(ctx, ep, st, t, sp.Mirror, 0)
	}
	handled, streaming := r.toOwner(ctx, v, owner, t, 1)
	if handled {
		return streaming
	}
	r.spills.Abandon(t, owner)
	lim, open := r.fb.Limiter(t, v, owner)
	if !open {
		return r.refuseZeroShare(ctx, t)
	}
	return r.serveLocal(ctx, ep, st, t, lim, 0)
}

// refuseNotJoined answers a client request that reached a cluster node before
// it joined: it knows no owners yet, and enforcing on its own would admit
// on top of whoever owns the tenant.
func (r *Router) refuseNotJoined(ctx *fasthttp.RequestCtx) bool {
	r.tell.SetNode(&ctx.Response.Header)
	reply.FailSoon(ctx, fasthttp.StatusServiceUnavailable, "server_error", "not_ready",
		"This gateway node has not joined its cluster yet; retry in 1s.")
	return false
}

func (r *Router) refuseZeroShare(ctx *fasthttp.RequestCtx, t *tenant.Tenant) bool {
	r.tell.SetNode(&ctx.Response.Header)
	reply.FailSoon(ctx, fasthttp.StatusTooManyRequests, "requests", "rate_limit_exceeded",
		"The node enforcing this tenant's limits is unreachable and this node's share of them is zero. Please try again in 1s.")
	r.tell.Refused(r.clock(), &t.RefusedLog, &reqlog.Line{Tenant: t.Name, Level: reqlog.FallbackShare, By: t.Name, Dimension: limiter.Requests, RetryAfter: time.Second}, &ctx.Response)
	return false
}

// hopCatchUp bounds how long a hop waits for this node's ring to make it
// the tenant's owner: gossip reaches members at different times, so the
// sender may see a change (a crash detected, a join) before this node does.
const hopCatchUp = 1500 * time.Millisecond

// hopLimiter picks the limiter a hop is enforced on. The owner's, when this
// node owns the tenant, or owned it within the last window (it handed the
// tenant over and still counts its calls, which it reports to the new
// owner). A hop for a tenant this node never owned means the sender's ring
// is ahead of this node's: the hop waits for this node to catch up and
// take the tenant over with its state; if it does not in time, the hop
// gets this node's strict share rather than an owner limiter that knows
// nothing of the tenant.
func (r *Router) hopLimiter(t *tenant.Tenant) (*limiter.Tenant, bool) {
	// A tenant's owner changes with the view (trackOwnership).
	v, owned := r.view.Await(hopCatchUp, func(*cluster.Lookup) bool {
		until := t.OwnedUntil.Load()
		return until == ownedNow || until > r.clock()-int64(t.Core().Lim.Window())
	})
	if owned {
		return t.Core().Lim, true
	}
	return r.fb.Limiter(t, v, v.Owner(t.Name))
}

// serveLocal enforces the tenant's limits on lim and serves the request; hops
// is how many nodes it came through (0: from a client).
func (r *Router) serveLocal(ctx *fasthttp.RequestCtx, ep upstream.Endpoint, st *tenant.State, t *tenant.Tenant, lim *limiter.Tenant, hops int) bool {
	return r.serveLocalOnce(ctx, ep, st, t, lim, hops, firstTry)
}

// A request that met a spillover starting or ending is decided again, once:
// on the spill (it found the limiter sealed), or on the limiter (it found
// the spill closed or fenced).
type retry uint8

const (
	firstTry retry = iota
	retrySpill
	retryLimiter
)

// serveLocalOnce is serveLocal for a request tried again (retry).
func (r *Router) serveLocalOnce(ctx *fasthttp.RequestCtx, ep upstream.Endpoint, st *tenant.State, t *tenant.Tenant, lim *limiter.Tenant, hops int, again retry) bool {
	r.tell.SetNode(&ctx.Response.Header)
	c := r.newCall(ctx, ep, st, t, lim)
	if c == nil {
		return false // answered
	}
	c.hops, c.again = hops, again
	r.chooseSpill(st, c)
	r.estimate(c)
	if c.sp == nil && !r.setLevels(c) {
		return r.refuseZeroShare(ctx, t)
	}
	if c.lim == t.Core().Lim && (!t.AwaitHandoff() || !c.levels.AwaitHandoff()) {
		return r.refuseMoving(ctx)
	}
	return r.firstTry(ctx, ep, st, c)
}

// newCall parses the request for t on lim and finds its upstream; nil when
// it answered the request (bad input, no upstream).
func (r *Router) newCall(ctx *fasthttp.RequestCtx, ep upstream.Endpoint, st *tenant.State, t *tenant.Tenant, lim *limiter.Tenant) *call {
	req, err := upstream.ParseRequest(ep, ctx.PostBody())
	if err != nil {
		r.roomHeaders(ctx, lim)
		var ce *upstream.ClientError
		if errors.As(err, &ce) {
			reply.FailParam(ctx, ce)
		} else {
			reply.Fail(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "invalid_request", err.Error())
		}
		return nil
	}
	prov, err := st.Provider(req.Model)
	switch {
	case errors.Is(err, tenant.ErrUnknownModel):
		r.roomHeaders(ctx, lim)
		reply.Fail(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "model_not_found",
			fmt.Sprintf("The model %q is not served by this gateway. GET /v1/models lists the models it serves.", req.Model))
		return nil
	case err != nil:
		reply.Fail(ctx, fasthttp.StatusServiceUnavailable, "server_error", "no_upstream", "No upstream is configured.")
		return nil
	}
	if (ep == upstream.Messages) != (prov.Kind == upstream.Anthropic) {
		r.roomHeaders(ctx, lim)
		reply.Fail(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "wrong_endpoint",
			fmt.Sprintf("Model %q is served by upstream %q, which does not take %s.", req.Model, prov.Name, ctx.Path()))
		return nil
	}
	c := callPool.Get().(*call)
	*c = call{r: r, t: t, lim: lim, prov: prov, req: req, class: classOf(t, &ctx.Request.Header), acc: reqlog.Call(ctx, t.Name, req.Model)}
	c.bud.Hold = provider.NewHold(st.Budgets[prov])
	return c
}

// roomHeaders writes lim's rate-limit headers on an answer that charged
// the tenant nothing (bad input, a provider's refusal): a client sees its
// room on every answer.
func (r *Router) roomHeaders(ctx *fasthttp.RequestCtx, lim *limiter.Tenant) {
	d := lim.Peek(r.clock())
	reply.SetRateHeaders(&ctx.Response.Header, &d)
}

// chooseSpill counts the arrival that decides a spillover on the owner,
// and puts a spilled tenant's call on its spill: the owner serves it on
// the budget like every node.
func (r *Router) chooseSpill(st *tenant.State, c *call) {
	t := c.t
	owned := c.lim == t.Core().Lim
	if owned && c.again == firstTry && st.Cfg.Limits.SpilloverRPS > 0 {
		t.Arrivals.Add(1) // the rate that decides a spillover (package spillover)
		if !t.Listed.Load() && t.Listed.CompareAndSwap(false, true) {
			r.spills.Note(t)
		}
	}
	s := t.Spilled()
	switch {
	case s == nil:
	case owned && s.Owner == r.node:
		if c.again != retryLimiter {
			if sp := t.OwnerSpill(r.node); sp != nil {
				c.lim, c.sp = sp.Mirror, sp
			}
		}
	case c.lim == s.Mirror:
		c.sp = s
	}
}

// estimate reserves c's tokens: its prompt, estimated or counted, and its
// completion's guess (package usage).
func (r *Router) estimate(c *call) {
	c.res = r.tokens.Estimate(c.counts(), c.t.Limits.Tokens, c)
}

// counts is what package usage reads and writes of c.
func (c *call) counts() usage.Call {
	return usage.Call{Tenant: c.t.Name, Req: &c.req, Res: &c.res, Prompt: &c.prompt}
}

// LimitTokens is the tokens per window of the limiter c is decided on
// (usage.Room).
func (c *call) LimitTokens() int64 { return c.lim.Limits().Tokens }

// MayCount reports whether c's large prompt is worth counting
// (usage.Room): not for a request its rpm refuses and that will not wait.
func (c *call) MayCount() bool {
	d := c.lim.Check(c.r.clock(), 0)
	return d.Allowed || d.Limited != limiter.Requests || c.mayQueue(&d)
}

// firstTry decides c on arrival (decide) and acts on the outcome: served,
// waiting in a line, refused, or decided elsewhere.
func (r *Router) firstTry(ctx *fasthttp.RequestCtx, ep upstream.Endpoint, st *tenant.State, c *call) bool {
	c.at = wait.NotQueued
	o := r.decide(c)
	switch {
	case o.Verdict == admit.Taken:
		return r.serveAdmitted(ctx, c, o.Shadowed)
	case o.At == atProvider:
		return r.providerRefused(ctx, ep, st, c)
	case o.Verdict == admit.Behind:
		// Others wait already: behind them, in order (the budgets are
		// taken again when its turn comes).
		return r.admitQueued(ctx, ep, st, c, nil, nil)
	case o.Verdict == admit.Moved:
		return r.decideMoved(ctx, ep, st, c, o.At)
	}
	d := c.refusal()
	if !d.TooLarge && c.mayQueue(&d) {
		// Room within the wait budget: the request waits for it.
		return r.admitQueued(ctx, ep, st, c, &d, nil)
	}
	reply.SetRateHeaders(&ctx.Response.Header, &d)
	c.t.Counters().Refused(d.Limited)
	return r.refuseOn(ctx, c, &d, st)
}

// refuseOn answers c's refusal by its tenant's limits or a level's (d),
// and logs it (package reqlog).
func (r *Router) refuseOn(ctx *fasthttp.RequestCtx, c *call, d *limiter.Decision, st *tenant.State) bool {
	reply.RefuseOn(ctx, d, st.Cfg.Limits.Window, int64(c.res.Total), c.refusedBy)
	e := c.levels.Refuser(c.t, c.refusedLevel)
	ln := reqlog.OnDecision(c.t.Name, e.KindName(), e.Name, d)
	r.tell.Refused(r.clock(), &c.t.RefusedLog, &ln, &ctx.Response)
	return false
}

// providerRefused answers a first try the provider's budgets refused: in
// the budget's line when its limit has room within the wait budget, or
// others wait for it; else a 429 naming it.
func (r *Router) providerRefused(ctx *fasthttp.RequestCtx, ep upstream.Endpoint, st *tenant.State, c *call) bool {
	br := &c.bud.refusal
	if w := c.t.QueueWait(c.class); w > 0 && br.Waitable(w, wait.MayWait) {
		return r.admitQueued(ctx, ep, st, c, nil, br)
	}
	return r.refusedByBudget(ctx, c, br, c.t.Counters().Upstream)
}

// refusedByBudget answers a request a provider's budget has no room for
// (br): the tenant's own rate-limit headers, the refusal counted on
// counter, and a 429 naming the budget.
func (r *Router) refusedByBudget(ctx *fasthttp.RequestCtx, c *call, br *provider.Refusal, counter prometheus.Counter) bool {
	r.roomHeaders(ctx, c.lim)
	counter.Inc()
	reply.RefuseBudget(ctx, &br.D, br.On.What())
	ln := reqlog.OnBudget(c.t.Name, br.On.ShadowName(), &br.D, br.On.Limits())
	r.tell.Refused(r.clock(), &c.t.RefusedLog, &ln, &ctx.Response)
	return false
}

// decideMoved decides again, once, a first try whose room moved (at): a
// spill ended, a limiter sealed for a spill starting or ending, or an
// entity handed over, taken back from the node that bounced the request
// here, else passed on to its new owner.
func (r *Router) decideMoved(ctx *fasthttp.RequestCtx, ep upstream.Endpoint, st *tenant.State, c *call, at int) bool {
	t, lim, hops := c.t, c.lim, c.hops
	if c.sp != nil {
		return r.redecideSpill(ctx, ep, st, c)
	}
	moved := lim
	if at == atLevels {
		// A level frozen for the node that bounced the request back
		// here is taken back like a tenant (tookBack).
		moved = c.levels.Limiter(c.refusedLevel - 1)
	} else if sp := t.Spilled(); lim == t.Core().Lim && lim.MovedTo() == "" && sp != nil && sp.Owner == r.node {
		switch c.again {
		case firstTry:
			// Sealed for a spill starting meanwhile: once more, on it
			// (or on the limiter again, if the switch failed).
			t.OwnerSpill(r.node) // waits for it to start
			return r.serveLocalOnce(ctx, ep, st, t, lim, hops, retrySpill)
		case retrySpill:
			// Sealed for a spill that is ending (closed, its members'
			// reports still coming in): on the limiter, once it is
			// unsealed, not a 503.
			sp.WaitDone(spillEndWait)
			return r.serveLocalOnce(ctx, ep, st, t, lim, hops, retryLimiter)
		}
	}
	if c.again == firstTry && r.tookBack(ctx, c, moved, hops) {
		return r.serveLocalOnce(ctx, ep, st, t, lim, hops, retryLimiter)
	}
	return r.movedOn(ctx, t, moved, hops)
}

// refusal is the decision that refused c: its level's, when a level did,
// else its tenant's (or its spill's).
func (c *call) refusal() limiter.Decision {
	if i := c.refusedLevel - 1; i >= 0 {
		return c.levels.Decision(i)
	}
	return c.d
}

// serveAdmitted serves a call its decision admitted: counted, its
// fallback-share admissions entered in their ledgers, sent upstream. A
// call its tenant's limits refused in shadow mode is served uncharged.
func (r *Router) serveAdmitted(ctx *fasthttp.RequestCtx, c *call, shadowed bool) bool {
	t := c.t
	d, own := c.headers()
	if shadowed {
		r.shadowRefused(ctx, t, &d)
		r.levelsShadowed(ctx, c)
		r.levelsAdmitted(c)
		return r.forward(ctx, c)
	}
	reply.SetRateHeaders(&ctx.Response.Header, &d)
	r.admitted(ctx, c)
	if c.lim == t.Core().Fb.Made() {
		c.fb = r.fb.Admitted(t, &c.tk, 0)
	}
	r.levelsShadowed(ctx, c)
	r.levelsAdmitted(c)
	if c.hops > 0 && c.levels.Len() > 0 && c.lim == t.Core().Lim {
		setLevelsUsed(&ctx.Response.Header, c, own)
	}
	streaming := r.forward(ctx, c)
	if !streaming && c.at == wait.NotQueued && c.sp == nil {
		recycle(c)
	}
	return streaming
}

// callPool keeps finished calls for the next requests: a call is a
// kilobyte, and one made afresh for every request cost the handler about
// 0.9 µs of its 5.5 (BenchmarkHandler, 6 alternations), most of it in cache
// misses on new memory.
var callPool = sync.Pool{New: func() any { return new(call) }}

// recycle gives c back to callPool if nothing can reach it any more: it is
// finished, and its watch did not fire (the goroutine that finishes a call
// whose client is gone holds it). Its watch, stopped, may still be held by
// the ticking goroutine or, for a hop, found by an edge's cancel: both do
// nothing with a stopped watch. Only the plain path recycles: a call that
// waited in a line or was served on a spill is left to the collector.
func recycle(c *call) {
	if !c.finished.Load() || (c.watch != nil && c.watch.WasGone()) {
		return
	}
	*c = call{} // drops what it points to: its body's texts, its tenant
	callPool.Put(c)
}

// mayQueue reports whether a request d refuses waits in its tenant's line
// for room: the line exists, its class may wait, and the room is due
// within the wait.
func (c *call) mayQueue(d *limiter.Decision) bool {
	if c.t.LineFor(c.lim, c.hops) == nil {
		return false
	}
	w := c.t.QueueWait(c.class)
	return w > 0 && wait.MayWait(d.Limited == limiter.Concurrency, d.RetryAfter, w)
}

// redecideSpill decides a request whose tenant's spill ended meanwhile, or
// is ending (fenced), the usual way, once the owner decides alone
// (tenant.Tenant.OwnerSpill and spillover.Loop.Edge skip a closed or
// fenced spill, so this does not come back; an edge hands the request to
// the owner).
func (r *Router) redecideSpill(ctx *fasthttp.RequestCtx, ep upstream.Endpoint, st *tenant.State, c *call) bool {
	r.cancelBudgets(c)
	if c.sp.Owner == r.node {
		c.sp.WaitDone(spillEndWait)
		return r.serveLocalOnce(ctx, ep, st, c.t, c.t.Core().Lim, c.hops, retryLimiter)
	}
	return r.serveAPI(ctx, ep)
}

// admitted counts an admitted call (it goes upstream now) and tells the
// OnAdmit hook.
func (r *Router) admitted(ctx *fasthttp.RequestCtx, c *call) {
	c.t.Counters().Allowed.Inc()
	c.t.Counters().Reserved.Add(float64(c.res.Total))
	if r.onAdmit != nil {
		r.onAdmit(c.t.Name, r.clock(), reqlog.ID(&ctx.Response.Header))
	}
}

// authenticate finds the tenant by the hash of the presented key: no
// plaintext comparison, so no timing leak of how much of a key matched.
func authenticate(st *tenant.State, h *fasthttp.RequestHeader) *tenant.Tenant {
	var kv [2][]byte
	reply.FirstHeaders(h, keyHeaders[:], kv[:])
	key := kv[0]
	if len(key) > 7 && bytes.EqualFold(key[:7], []byte("Bearer ")) {
		key = bytes.TrimSpace(key[7:])
	} else {
		key = kv[1]
	}
	if len(key) == 0 {
		return nil
	}
	return st.ByKey[sha256.Sum256(key)]
}

// keyHeaders carry a client's key: a bearer token, else Anthropic's.
var keyHeaders = [2][]byte{[]byte("Authorization"), []byte("X-Api-Key")}

// hopHeaders mark a request from a peer (hop.go).
var hopHeaders = [2][]byte{[]byte(hopHeader), []byte(sigHeader)}

// forward sends an admitted call upstream and answers the client. It reports
// true when the answer is a stream that finishes later.
func (r *Router) forward(ctx *fasthttp.RequestCtx, c *call) bool {
	r.budgetShadowed(ctx, c)
	body, err := upstream.PrepareBody(c.req, ctx.PostBody())
	if err != nil {
		r.finish(c, upstream.Usage{}, false, 0)
		reply.Fail(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "invalid_request", err.Error())
		return false
	}
	upReq := fasthttp.AcquireRequest()
	c.prov.Prepare(upReq, ctx.Path(), body, &ctx.Request.Header)
	reqlog.CopyID(&upReq.Header, &ctx.Response.Header)
	resp := fasthttp.AcquireResponse()
	w := r.watchClient(ctx, c)
	hop := ""
	if c.hops > 0 {
		hop = string(ctx.Request.Header.Peek(hopHeader))
		r.watches.hops.add(hop, w)
	}
	err = c.prov.Do(upReq, resp, c.req.Stream)
	fasthttp.ReleaseRequest(upReq)
	if hop != "" {
		r.watches.hops.remove(hop)
	}
	if w.Stop() {
		// The client hung up while the upstream was thinking: the call
		// was finished then; what the upstream says now goes nowhere.
		r.clientGone(ctx, c, w, resp, err)
		return false
	}
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		r.finish(c, usage.Failed(c.counts(), err), false, 0)
		r.upstreamFailed(ctx, c.prov, err)
		return false
	}
	status := resp.StatusCode()
	r.metrics.Answered(c.prov.Name, status)
	r.learnProvider(c, &resp.Header, status)
	if status == fasthttp.StatusUnauthorized || status == fasthttp.StatusForbidden {
		// The upstream refused the gateway's own key: not the client's fault.
		fasthttp.ReleaseResponse(resp)
		r.finish(c, upstream.Usage{}, false, 0)
		r.log.Error("upstream", "upstream", c.prov.Name, "status", status, "detail", "upstream rejected the configured api_key")
		reply.Fail(ctx, fasthttp.StatusBadGateway, "upstream_error", "upstream_auth",
			fmt.Sprintf("Upstream %q rejected the gateway's credentials.", c.prov.Name))
		return false
	}
	reply.CopyHeaders(&ctx.Response.Header, &resp.Header)
	ctx.SetStatusCode(status)
	if status == fasthttp.StatusTooManyRequests && len(ctx.Response.Header.Peek("Retry-After")) == 0 {
		// The provider's own 429 passes to the client (ringgate does not
		// retry it against the same upstream), with a Retry-After when
		// the provider gave none: the second its budget is told to wait
		// (learnProvider).
		ctx.Response.Header.Set("Retry-After", "1")
	}
	if status == fasthttp.StatusOK && bytes.HasPrefix(resp.Header.ContentType(), []byte("text/event-stream")) {
		r.stream(ctx, c, resp)
		return true
	}

	ctx.Response.ResetBody()
	err = reply.ReadAnswer(&ctx.Response, resp)
	fasthttp.ReleaseResponse(resp)
	if err != nil {
		ctx.Response.ResetBody()
		r.finish(c, usage.Failed(c.counts(), err), false, 0)
		r.upstreamFailed(ctx, c.prov, err)
		return false
	}
	if status == fasthttp.StatusOK && upstream.LooksLikeSSE(ctx.Response.Body()) {
		// A stream under another Content-Type (a server that sets none,
		// or text/plain), read whole: settled on its events, and passed
		// through the filter as a stream is. Read as JSON, it was
		// charged its prompt alone.
		var out []byte
		u, ok, completion := r.tokens.FilterWhole(c.counts(), c.prov.Kind, ctx.Response.Body(), func(ev []byte) error {
			out = append(out, ev...)
			return nil
		})
		ctx.Response.SetBodyRaw(out)
		r.finish(c, u, ok, completion)
		reply.AnswerWriteDeadline(ctx, r.clientWriteIdle)
		return false
	}
	u, ok, completion := r.tokens.AnswerUsage(c.counts(), c.prov.Kind, status, ctx.Response.Body())
	r.finish(c, u, ok, completion)
	reply.AnswerWriteDeadline(ctx, r.clientWriteIdle)
	return false
}

// stream relays an SSE answer event by event (the events of one upstream
// read in one flush), and settles when it ends. A write error means the
// client hung up, or stopped reading for clientWriteIdle: the upstream call
// is cut and the slot freed at once.
func (r *Router) stream(ctx *fasthttp.RequestCtx, c *call, resp *fasthttp.Response) {
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	wd := reply.WriteDeadline(ctx, r.clientWriteIdle)
	r.tell.SetStream(ctx, func(w *bufio.Writer) {
		defer r.done()
		defer wd.Done()
		f := usage.NewFilter(c.counts(), c.prov.Kind)
		bp := reply.StreamBufs.Get().(*[]byte)
		defer reply.StreamBufs.Put(bp)
		// The events of one read from the upstream go out in one flush:
		// they arrived together, so the client gets each as soon as it
		// would with a flush per event, for one write instead of one per
		// event (a busy node reads several at a time).
		emit := func(ev []byte) error {
			_, err := w.Write(ev)
			return err
		}
		flushed := func(err error) error {
			if err != nil {
				return err
			}
			wd.Extend()
			return w.Flush()
		}
		src := resp.BodyStream()
		var clientGone, upstreamErr error
		if src == nil {
			// Read whole: the client asked for JSON, the provider
			// streamed all the same.
			clientGone = flushed(f.Write(resp.Body(), emit))
		}
		for src != nil {
			n, err := src.Read(*bp)
			if n > 0 {
				if clientGone = flushed(f.Write((*bp)[:n], emit)); clientGone != nil {
					break
				}
			}
			if err != nil {
				if err != io.EOF {
					upstreamErr = err
				}
				break
			}
		}
		if clientGone == nil {
			clientGone = flushed(f.Close(emit))
		}
		fasthttp.ReleaseResponse(resp) // closes the upstream connection if unread
		complete := clientGone == nil && upstreamErr == nil && !f.Partial()
		u, ok, completion := r.tokens.StreamUsage(c.counts(), f, complete)
		r.finish(c, u, ok, completion)
		if !complete {
			r.log.Info("stream_cut", "tenant", c.t.Name, "client_gone", clientGone != nil, "upstream_error", errString(upstreamErr))
		}
	})
}

// finish settles a call's tokens and frees its slot. With usage reported, that
// is the truth; without it, a successful call is charged its prompt estimate
// plus the counted completion, and a failed one nothing (no provider bills a
// refused call). Only successful calls teach the estimator.
//
// A call is finished once: later calls do nothing.
func (r *Router) finish(c *call, u upstream.Usage, ok bool, countedCompletion int) {
	if c.finished.Swap(true) {
		return
	}
	// The provider's budgets settle on what it reported or what a
	// successful call counted; a call that failed on the way may still
	// have been billed (its prompt read): its charge stands.
	r.settle(c, r.tokens.Actual(c.counts(), u, ok, countedCompletion), u.Reported || ok, false)
}

// settleLate settles again, on the usage of the answer that came after, a
// call finished at its reservation when its client hung up (callGone): the
// provider generated and billed that answer all the same (a tenant whose
// clients time out before long answers was charged its reservations, a
// fraction of what it spent). Its tenant's slot was freed at the hang-up;
// its tokens move now, to what the provider reports, up or down, or as a
// call refused with its client there (a failed answer without usage: 0),
// and its provider budgets, held while the provider ran it, are finished.
// The handler calls it once, after the hang-up's finish is done
// (WaitFired), or releaseHeld when the answer says nothing.
func (r *Router) settleLate(c *call, u upstream.Usage, ok bool, countedCompletion int) {
	c.providerHeld = false
	r.settle(c, r.tokens.Actual(c.counts(), u, ok, countedCompletion), u.Reported || ok, true)
}

// releaseHeld finishes the provider budgets of a call finished when its
// client hung up (callGone), once the provider is done with it and its
// answer says nothing usable (a stream cut unread, an error): slots freed,
// charges standing.
func (r *Router) releaseHeld(c *call) {
	if c.providerHeld {
		c.providerHeld = false
		r.finishBudgets(c, 0, false)
	}
}

// settle charges a call actual tokens wherever it was admitted (its
// budgets when known, its tenant's limiter or share, a spill, its levels)
// and frees its slots. late: a second settlement (settleLate), which moves
// tokens only: the slots, the spill's carried one included, went with the
// first.
func (r *Router) settle(c *call, actual int, known, late bool) {
	if !c.providerHeld {
		r.finishBudgets(c, int64(actual), known)
	}
	if c.lim == c.t.Core().Lim {
		// If the tenant was handed over since this call was admitted, its
		// owner holds the slot and the reservation now.
		sp := c.t.Spilled()
		var fd limiter.Delta
		if sp != nil && sp.Owner == r.node {
			fd = limiter.FinishDelta(&c.tk, int64(actual))
		}
		if d, handed := c.lim.FinishOrHand(r.clock(), &c.tk, int64(actual)); handed {
			r.reportDelta(c.t, d)
		}
		c.t.Core().Queue.Kick() // a slot freed, tokens settled
		if sp != nil && sp.Owner == r.node {
			// Admitted before the tenant spilled: its slot was carried
			// into the budget, its tokens seeded at its reservation.
			if !late {
				sp.Budget.ReleaseCarried()
			}
			if fd.Tokens > 0 {
				sp.Budget.Charge(r.clock(), lease.Use{Bucket: fd.Bucket, Amount: lease.Amount{Tokens: fd.Tokens}}, false)
			}
		}
	} else {
		var d limiter.Delta
		if c.fb != nil {
			d = limiter.FinishDelta(&c.tk, int64(actual))
			if c.sp != nil {
				d.Epoch = c.sp.Epoch
			}
		}
		c.lim.Finish(r.clock(), &c.tk, int64(actual))
		if c.fb != nil {
			r.fb.Finished(c.t, c.fb, d)
		}
		if c.lim == c.t.Core().Fb.Made() {
			c.t.Core().FbQueue.Kick() // a slot of the share freed, tokens settled
		}
	}
	r.finishLevels(c, int64(actual))
	// A counter: a second settlement adds only what exceeds the first
	// (a call served uncharged in shadow mode has no ticket to read it
	// from, and would be counted twice).
	c.t.Counters().Settled.Add(float64(max(int64(actual)-c.settled, 0)))
	c.settled = max(c.settled, int64(actual))
	c.acc.Settled(int64(c.res.Total), c.settled)
}

func (r *Router) upstreamFailed(ctx *fasthttp.RequestCtx, p *upstream.Provider, err error) {
	if reply.UpstreamFailed(ctx, p.Name, err) {
		r.metrics.TimedOut(p.Name)
		return
	}
	r.metrics.Failed(p.Name)
	r.log.Warn("upstream", "upstream", p.Name, "error", err.Error())
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
