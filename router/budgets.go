package router

import (
	"fmt"
	"slices"
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

// The provider's own limits ([[upstreams]] rpm/tpm/concurrency and
// [[upstreams.model_limits]]) are budgets of the whole cluster, leased by
// each node (package lease). The node that calls the upstream — the
// tenant's owner, or an edge on its fallback share — takes a request from
// the upstream's budget and its model's before the tenant's limiter is
// asked, and gives them back at once if the tenant refuses: all three are
// charged, or none.

// provBudgets are one upstream's budgets on this node.
type provBudgets struct {
	name   string
	single bool                   // the upstream serves one model: its answers' limits are the upstream's
	up     *budgetLine            // nil: no upstream-wide limit
	models map[string]*budgetLine // per model, for the models limited
	// learned are the models' limits its answers stated (learned.go);
	// base and shadow are what their budgets are made with.
	learned *learnedModels
	base    lease.Config
	shadow  bool
}

// budgetLine is one budget and the line of requests waiting for it on this
// node (queue.go): both kept across reloads, by the budget's key.
type budgetLine struct {
	*lease.Budget
	line   *queue.Queue
	limits limiter.Limits // configured: what a tenant's weight in the line is measured on
	what   string         // "upstream x", "model y": named in a refusal
	closed bool           // on_redis_down = closed: nothing to wait for while degraded
	// shadow: the upstream's limits are in shadow mode: a refusal is
	// served (budgetShadowed), logged as shadowName.
	shadow     bool
	shadowName string
	meter      logMeter
}

// budgetTake is what one request took of one budget.
type budgetTake struct {
	b     *lease.Budget
	tk    lease.Ticket
	which int // 0: its upstream's budget, 1: its model's
}

// maxRenewalWait bounds how long a request whose budget has no block left
// waits for a grant in flight (the first request after an idle spell, say).
const maxRenewalWait = 15 * time.Millisecond

func onStoreDown(s string) lease.OnStoreDown {
	switch s {
	case config.OnRedisDownOpen:
		return lease.Open
	case config.OnRedisDownClosed:
		return lease.Closed
	}
	return lease.Share
}

// buildBudgets gets this node's budgets of every limited upstream and model
// from the leaser (a reload keeps their blocks), and the models' learned
// ones (learned.go), and drops the others. Every upstream has its
// provBudgets: one without limits may still learn a model's.
func (r *Router) buildBudgets(cfg *config.Config, provs []*upstream.Provider) map[*upstream.Provider]*provBudgets {
	out := make(map[*upstream.Provider]*provBudgets)
	keep := make(map[string]bool)
	var held []*sync.Mutex // the upstreams' learnedModels, until Retain kept their budgets
	defer func() {
		for _, mu := range held {
			mu.Unlock()
		}
	}()
	line := func(c lease.Config, what, name string, shadow bool) *budgetLine {
		keep[c.Key] = true
		return r.budgetLine(c, what, name, shadow)
	}
	for i, uc := range cfg.Upstreams {
		pb := &provBudgets{name: uc.Name, models: make(map[string]*budgetLine), single: len(uc.Models) <= 1,
			shadow: uc.Mode == config.ModeShadow, learned: r.learnedOf(uc.Name)}
		pb.base = lease.Config{Window: cfg.Limits.Window, Settles: uc.Kind == config.KindAnthropic, OnStoreDown: onStoreDown(uc.OnRedisDown),
			BandFloor: 1.0 / queue.BatchShare} // batch's share of a line, cluster-wide
		if uc.RPM > 0 || uc.TPM > 0 || uc.Concurrency > 0 {
			c := pb.base
			c.Key = "up:" + uc.Name
			c.Limits = limiter.Limits{Requests: int64(uc.RPM), Tokens: int64(uc.TPM), Concurrency: int64(uc.Concurrency)}
			pb.up = line(c, "upstream "+uc.Name, "upstream/"+uc.Name, pb.shadow)
		}
		for _, ml := range uc.ModelLimits {
			c := pb.base
			c.Key = "up:" + uc.Name + ":model:" + ml.Model
			c.Limits = limiter.Limits{Requests: int64(ml.RPM), Tokens: int64(ml.TPM), Concurrency: int64(ml.Concurrency)}
			pb.models[ml.Model] = line(c, "model "+ml.Model, "upstream/"+uc.Name+"/model/"+ml.Model, pb.shadow)
		}
		// The learned budgets on the new window and mode; a model now
		// configured is on its configured limit. Held until the leaser
		// kept them (learnedModels).
		l := pb.learned
		l.mu.Lock()
		held = append(held, &l.mu)
		l.name, l.base, l.shadow = uc.Name, pb.base, pb.shadow
		l.applied = limiter.Limits{Requests: int64(uc.RPM), Tokens: int64(uc.TPM)}
		l.configured = make(map[string]bool, len(pb.models))
		for m := range pb.models {
			l.configured[m] = true
		}
		for model, lb := range l.all() {
			if l.configured[model] || pb.single {
				l.set(model, nil)
				continue
			}
			c := pb.base
			c.Key, c.Limits = lb.Key(), lb.limits
			nb := *lb
			nb.budgetLine = line(c, lb.what, lb.shadowName, pb.shadow)
			l.set(model, &nb)
		}
		out[provs[i]] = pb
	}
	r.lines.mu.Lock()
	for name := range r.lines.learned {
		if !slices.ContainsFunc(cfg.Upstreams, func(u config.Upstream) bool { return u.Name == name }) {
			delete(r.lines.learned, name)
		}
	}
	for key, q := range r.lines.byKey {
		if !keep[key] {
			// Its waiters are decided on the new config once it is in
			// force (kickBudgetLines).
			delete(r.lines.byKey, key)
			r.lines.dropped = append(r.lines.dropped, q)
		}
	}
	r.lines.mu.Unlock()
	if st := r.state.Load(); st != nil {
		st.spillKeys(keep) // a reload keeps the spills
	}
	r.leaser.Retain(keep)
	return out
}

// budgetLine is the node's budget for c, from the leaser, with its line
// (kept across reloads by the budget's key).
func (r *Router) budgetLine(c lease.Config, what, name string, shadow bool) *budgetLine {
	b := r.leaser.Budget(c, func() int { return r.view.Load().liveMembers() })
	r.lines.mu.Lock()
	if r.lines.byKey == nil {
		r.lines.byKey = make(map[string]*queue.Queue)
	}
	q := r.lines.byKey[c.Key]
	if q == nil {
		q = &queue.Queue{}
		r.lines.byKey[c.Key] = q
	}
	r.lines.mu.Unlock()
	b.Watch(q.Kick, q.Waiting, lineBacklog(q))
	return &budgetLine{Budget: b, line: q, limits: c.Limits, what: what, closed: c.OnStoreDown == lease.Closed, shadow: shadow, shadowName: name}
}

// limited reports whether any budget of the upstream's may take a request.
func (pb *provBudgets) limited() bool {
	return pb != nil && (pb.up != nil || len(pb.models) > 0 || len(pb.learned.all()) > 0)
}

// lineBacklog reports the requests waiting in a budget's line by flow
// (tenant) and band, for the demand the budget reports.
func lineBacklog(q *queue.Queue) lease.Backlog {
	return func(fn func(key string, band, waiting int)) {
		q.EachFlow(func(key string, c queue.Class, n int) { fn(key, int(c), n) })
	}
}

// kickBudgetLines has the head of every budget's line try again, and of
// every line a reload dropped: the config in force changed.
func (r *Router) kickBudgetLines() {
	r.lines.mu.Lock()
	lines := make([]*queue.Queue, 0, len(r.lines.byKey)+len(r.lines.dropped))
	for _, q := range r.lines.byKey {
		lines = append(lines, q)
	}
	lines = append(lines, r.lines.dropped...)
	r.lines.dropped = nil
	r.lines.mu.Unlock()
	for _, q := range lines {
		q.Kick()
	}
}

// providerTokens is what the provider counts against its token limit when
// the request starts: OpenAI the prompt and max_tokens (or the completion
// estimate, whichever is larger); Anthropic the prompt and max_tokens,
// corrected to the usage at the end (lease.Config.Settles).
func providerTokens(c *call) int64 {
	completion := c.res.Completion
	if m := c.req.MaxTokens * max(1, c.req.Choices); m > completion {
		completion = m
	}
	return int64(c.res.Prompt + completion)
}

// budgetRefusal is why a request did not get its provider budgets: the
// budget refused (d), or others wait in its line (behind: the request
// goes after them, or is refused if it may not wait).
type budgetRefusal struct {
	d      lease.Decision
	on     *budgetLine
	stage  stage // on's line
	behind bool
}

// Where a queued request waits. From the upstream's line to the model's it
// goes forward only: the head of the model's line does not go behind the
// waiters of the upstream's, it had its turn there (it may still be
// refused there and wait again). From its tenant's line, where it waited
// for its own limits, it goes behind every budget's waiters: its turn
// there came for its tenant, not for the provider.
type stage uint8

const (
	notQueued stage = iota
	inUpstreamLine
	inModelLine
	inTenantLine
	inLevelLine // a level of the tenant's limits: its model's, its team's (levels.go)
)

// takeBudgets takes the request from its upstream's and model's budgets,
// unless others wait for one it has not passed yet (c.at is where the
// request waits: the head of that line goes first). On a refusal it gives
// back what it took.
func (r *Router) takeBudgets(c *call) (budgetRefusal, bool) {
	pb, at := c.bud.pb, c.at
	if !pb.limited() {
		return budgetRefusal{}, true
	}
	tokens := providerTokens(c)
	c.bud.shadow = nil
	for i, b := range [2]*budgetLine{pb.up, pb.model(c.req.Model)} {
		if b == nil {
			continue
		}
		passed := (at == inUpstreamLine || at == inModelLine) && stage(i+1) <= at
		if !passed && stage(i+1) != at && !b.shadow && b.line.Waiting() > 0 {
			r.cancelProvider(c)
			if !c.bud.asked[i] {
				// Wanted from its arrival, not from its turn: the
				// budget's division follows what tenants ask.
				c.bud.asked[i] = true
				f := b.leaseFlow(c)
				b.AskFor(r.clock(), tokens, &f)
			}
			return budgetRefusal{d: b.behindDecision(r.clock()), on: b, stage: stage(i + 1), behind: true}, false
		}
		// A request counts once in a budget's demand, however many
		// tries it takes: asked until it is cancelled there (refused by
		// another limit, which then bounds it).
		f := b.leaseFlow(c)
		var tk lease.Ticket
		var d lease.Decision
		if c.bud.asked[i] {
			tk, d = b.RetakeFor(r.clock(), tokens, &f)
		} else {
			tk, d = b.TakeFor(r.clock(), tokens, &f)
		}
		c.bud.asked[i] = true
		if !d.Allowed && d.Renewal != nil {
			// No block left and a grant on its way: worth a short wait.
			timer := time.NewTimer(maxRenewalWait)
			select {
			case <-d.Renewal:
				tk, d = b.RetakeFor(r.clock(), tokens, &f)
			case <-timer.C:
			}
			timer.Stop()
		}
		if !d.Allowed && b.shadow {
			// Served without it (budgetShadowed): nothing taken.
			if c.bud.shadow == nil {
				c.bud.shadow, c.bud.shadowD = b, d
			}
			continue
		}
		if !d.Allowed {
			r.cancelProvider(c)
			return budgetRefusal{d: d, on: b, stage: stage(i + 1)}, false
		}
		c.bud.takes[c.bud.n] = budgetTake{b.Budget, tk, i}
		c.bud.n++
	}
	return budgetRefusal{}, true
}

// waitable reports whether the request refused can wait for room until
// deadline: behind others, or refused with room due before then (not a
// closed budget with Redis down: nothing frees then).
func (br *budgetRefusal) waitable(deadline time.Time) bool {
	if br.behind {
		return true
	}
	if br.d.Degraded && br.on.closed {
		return false
	}
	return mayWait(br.d.Limited == limiter.Concurrency, br.d.RetryAfter, deadline)
}

// behindDecision is the refusal of a request that finds others waiting for
// the budget and may not wait itself: the room that frees is theirs.
func (b *budgetLine) behindDecision(now int64) lease.Decision {
	d := lease.Decision{Limited: limiter.Concurrency, RetryAfter: time.Second, Degraded: b.Degraded()}
	switch {
	case b.limits.Requests > 0:
		d.Limited, d.RetryAfter = limiter.Requests, b.RetryAfter(now)
	case b.limits.Tokens > 0:
		d.Limited, d.RetryAfter = limiter.Tokens, b.RetryAfter(now)
	}
	return d
}

// flowOf is a tenant's flow in a budget's line, for a request refused on
// dim: its weight is its own limit on that dimension, capped at the
// budget's (a tenant allowed more than the provider is allowed the
// provider; one without a limit there, the same), so tenants sharing a
// provider's limit split it as their own limits do, whatever each sends.
// Refused on tokens, a request costs its tokens.
func (b *budgetLine) flowOf(c *call, dim limiter.Dimension) queue.Flow {
	w := b.weights(c)
	f := queue.Flow{Key: c.t.name, Cost: 1}
	switch {
	case dim == limiter.Tokens && b.limits.Tokens > 0, b.limits.Requests <= 0 && b.limits.Tokens > 0:
		f.Weight, f.Cost = w.Tokens, float64(providerTokens(c))
	case dim == limiter.Requests && b.limits.Requests > 0, b.limits.Concurrency <= 0:
		f.Weight = w.Requests
	default:
		f.Weight = w.Concurrency
	}
	return f
}

// weights are a tenant's weights on a budget, for its line (flowOf) and
// for the budget's division among the cluster's tenants (leaseFlow): on
// each dimension its own limit, capped at the budget's.
func (b *budgetLine) weights(c *call) lease.Weights {
	tl := c.t.limits // configured, read without the limiter's lock: per request
	weight := func(tenant, budget int64) float64 {
		if tenant > 0 && tenant < budget {
			return float64(tenant)
		}
		return float64(max(budget, 1))
	}
	return lease.Weights{Requests: weight(tl.Requests, b.limits.Requests), Tokens: weight(tl.Tokens, b.limits.Tokens),
		Concurrency: weight(tl.Concurrency, b.limits.Concurrency)}
}

// leaseFlow is the call's flow in the budget's division: its tenant, in
// the band of its class, with its weights.
func (b *budgetLine) leaseFlow(c *call) lease.Flow {
	return lease.Flow{Key: c.t.name, Band: int(c.class), Weight: b.weights(c)}
}

// cancelBudgets gives back what the call took of its provider's budgets
// and of its spill's: it was not sent.
func (r *Router) cancelBudgets(c *call) {
	r.cancelProvider(c)
	if c.spill.b != nil {
		c.spill.b.Cancel(r.clock(), &c.spill.tk)
		c.spill.b = nil
	}
}

// cancelProvider gives back what the call took of its provider's budgets.
func (r *Router) cancelProvider(c *call) {
	if c.bud.n == 0 {
		return
	}
	now := r.clock()
	for i := range c.bud.n {
		c.bud.takes[i].b.Cancel(now, &c.bud.takes[i].tk) // its ask too
		c.bud.asked[c.bud.takes[i].which] = false
	}
	c.bud.n = 0
}

// finishBudgets ends the call on its budgets: slots freed, and, when the
// usage is known (settle), tokens settled where the provider settles
// (actual: what it bills); otherwise the charge made at the start stands.
func (r *Router) finishBudgets(c *call, actual int64, settle bool) {
	if c.bud.n == 0 && c.spill.b == nil {
		return // most calls: not a clock read for nothing
	}
	now := r.clock()
	for i := range c.bud.n {
		tk := &c.bud.takes[i].tk
		if !settle {
			actual = tk.Tokens()
		}
		c.bud.takes[i].b.Finish(now, tk, actual)
	}
	if c.spill.b != nil {
		// The tenant's own tokens settle on the usage, as its limiter does.
		if !settle {
			actual = c.spill.tk.Tokens()
		}
		c.spill.b.Finish(now, &c.spill.tk, actual)
	}
	// The budgets stay listed: a call settled again (settleLate) moves
	// its tokens on them (Finish frees a slot once; the last tokens win).
}

// refuseBudget answers a request the provider's limit has no room for.
func refuseBudget(ctx *fasthttp.RequestCtx, d *lease.Decision, what string) {
	setRetryAfter(&ctx.Response.Header, d.RetryAfter)
	dim := d.Limited.String()
	msg := fmt.Sprintf("The provider's limit on %s (%s) is reached for now. Please try again in %s.", dim, what, roundUp(max(d.RetryAfter, time.Millisecond)))
	if d.Degraded {
		msg = fmt.Sprintf("The provider's limit on %s (%s) is enforced on this node's strict share while the gateway's coordination store is unreachable. Please try again in %s.",
			dim, what, roundUp(max(d.RetryAfter, time.Millisecond)))
	}
	typ := dim
	if d.Limited == limiter.Concurrency {
		typ = "requests"
	}
	fail(ctx, fasthttp.StatusTooManyRequests, typ, "rate_limit_exceeded", msg)
}

// learnProvider passes what the provider's answer says of its limits to the
// budget they are about: the model's configured one, the upstream's when it
// serves one model, else the model's learned one (learnModel), made when
// the answer states a limit below the applied one. A provider allowing
// less than configured (a key shared with others, a lower tier) so shrinks
// the cluster's budget. A 429 without rate-limit headers says nothing is
// left until retry-after.
func (r *Router) learnProvider(c *call, h *fasthttp.ResponseHeader, status int) {
	pb := r.state.Load().budgets[c.prov]
	if pb == nil {
		return
	}
	var reqs, toks lease.Observed
	var from string
	if c.prov.Kind == upstream.Anthropic {
		from = "anthropic-ratelimit-requests-limit"
		reqs = observedAnthropic(h, "anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset")
		toks = observedAnthropic(h, "anthropic-ratelimit-tokens-limit", "anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset")
		// Anthropic's token headers are those of its tightest token
		// limit (input or output), not of the prompt + max_tokens
		// budget kept here: its remaining is listened to, not its limit.
		toks.Limit = 0
	} else {
		from = "x-ratelimit-limit-requests"
		reqs = observedOpenAI(h, "x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests")
		toks = observedOpenAI(h, "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens")
		if !reqs.Limited || reqs.Limit <= 0 {
			from = "x-ratelimit-limit-tokens"
		}
	}
	if status == fasthttp.StatusTooManyRequests && !reqs.Limited && !toks.Limited {
		after := time.Second
		if secs, err := strconv.Atoi(string(h.Peek("retry-after"))); err == nil && secs > 0 {
			after = time.Duration(secs) * time.Second
		}
		reqs = lease.Observed{Limited: true, Remaining: 0, Reset: after}
	}
	if !reqs.Limited && !toks.Limited {
		return
	}
	var b *budgetLine
	switch {
	case pb.models[c.req.Model] != nil:
		b = pb.models[c.req.Model]
	case pb.single:
		b = pb.up
	case r.learnModel(pb.learned, c.req.Model, reqs, toks, from):
		return
	default:
		// No budget of the model's: what is left of it, low, is taken
		// from the upstream's (the limit it states is the model's).
		b = pb.up
		reqs.Limit, toks.Limit = 0, 0
	}
	if b != nil {
		b.Observe(r.clock(), reqs, toks)
	}
}

func observedOpenAI(h *fasthttp.ResponseHeader, limit, remaining, reset string) lease.Observed {
	rem, err := strconv.ParseInt(string(h.Peek(remaining)), 10, 64)
	if err != nil {
		return lease.Observed{}
	}
	lim, _ := strconv.ParseInt(string(h.Peek(limit)), 10, 64)
	d, err := time.ParseDuration(string(h.Peek(reset)))
	if err != nil {
		d = time.Second
	}
	return lease.Observed{Limited: true, Limit: lim, Remaining: rem, Reset: d}
}

func observedAnthropic(h *fasthttp.ResponseHeader, limit, remaining, reset string) lease.Observed {
	rem, err := strconv.ParseInt(string(h.Peek(remaining)), 10, 64)
	if err != nil {
		return lease.Observed{}
	}
	lim, _ := strconv.ParseInt(string(h.Peek(limit)), 10, 64)
	d := time.Second
	if at, err := time.Parse(time.RFC3339, string(h.Peek(reset))); err == nil {
		d = max(0, time.Until(at))
	}
	return lease.Observed{Limited: true, Limit: lim, Remaining: rem, Reset: d}
}
