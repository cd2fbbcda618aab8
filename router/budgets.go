package router

import (
	"fmt"
	"strconv"
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
	single bool                   // the upstream serves one model: its answers' limits are the upstream's
	up     *budgetLine            // nil: no upstream-wide limit
	models map[string]*budgetLine // per model, for the models limited
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
	b  *lease.Budget
	tk lease.Ticket
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
// from the leaser (a reload keeps their blocks) and drops the others.
func (r *Router) buildBudgets(cfg *config.Config, provs []*upstream.Provider) map[*upstream.Provider]*provBudgets {
	out := make(map[*upstream.Provider]*provBudgets)
	keep := make(map[string]bool)
	members := func() int { return r.view.Load().liveMembers() }
	r.linesMu.Lock()
	defer r.linesMu.Unlock()
	if r.lines == nil {
		r.lines = make(map[string]*queue.Queue)
	}
	lineOf := func(c lease.Config, what, name string, shadow bool) *budgetLine {
		b := r.leaser.Budget(c, members)
		q := r.lines[c.Key]
		if q == nil {
			q = &queue.Queue{}
			r.lines[c.Key] = q
		}
		b.Watch(q.Kick, q.Waiting)
		keep[c.Key] = true
		return &budgetLine{Budget: b, line: q, limits: c.Limits, what: what, closed: c.OnStoreDown == lease.Closed, shadow: shadow, shadowName: name}
	}
	for i, uc := range cfg.Upstreams {
		pb := &provBudgets{models: make(map[string]*budgetLine), single: len(uc.Models) <= 1}
		shadow := uc.Mode == config.ModeShadow
		base := lease.Config{Window: cfg.Limits.Window, Settles: uc.Kind == config.KindAnthropic, OnStoreDown: onStoreDown(uc.OnRedisDown)}
		if uc.RPM > 0 || uc.TPM > 0 || uc.Concurrency > 0 {
			c := base
			c.Key = "up:" + uc.Name
			c.Limits = limiter.Limits{Requests: int64(uc.RPM), Tokens: int64(uc.TPM), Concurrency: int64(uc.Concurrency)}
			pb.up = lineOf(c, "upstream "+uc.Name, "upstream/"+uc.Name, shadow)
		}
		for _, ml := range uc.ModelLimits {
			c := base
			c.Key = "up:" + uc.Name + ":model:" + ml.Model
			c.Limits = limiter.Limits{Requests: int64(ml.RPM), Tokens: int64(ml.TPM), Concurrency: int64(ml.Concurrency)}
			pb.models[ml.Model] = lineOf(c, "model "+ml.Model, "upstream/"+uc.Name+"/model/"+ml.Model, shadow)
		}
		if pb.up != nil || len(pb.models) > 0 {
			out[provs[i]] = pb
		}
	}
	for key, q := range r.lines {
		if !keep[key] {
			// Its waiters are decided on the new config once it is in
			// force (kickBudgetLines).
			delete(r.lines, key)
			r.droppedLines = append(r.droppedLines, q)
		}
	}
	if st := r.state.Load(); st != nil {
		st.spillKeys(keep) // a reload keeps the spills
	}
	r.leaser.Retain(keep)
	return out
}

// kickBudgetLines has the head of every budget's line try again, and of
// every line a reload dropped: the config in force changed.
func (r *Router) kickBudgetLines() {
	r.linesMu.Lock()
	lines := make([]*queue.Queue, 0, len(r.lines)+len(r.droppedLines))
	for _, q := range r.lines {
		lines = append(lines, q)
	}
	lines = append(lines, r.droppedLines...)
	r.droppedLines = nil
	r.linesMu.Unlock()
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
// unless others wait for one it has not passed yet (at is where the
// request waits: the head of that line goes first). On a refusal it gives
// back what it took.
func (r *Router) takeBudgets(st *state, c *call, at stage) (budgetRefusal, bool) {
	pb := st.budgets[c.prov]
	if pb == nil {
		return budgetRefusal{}, true
	}
	tokens := providerTokens(c)
	c.shadowBudget = nil
	for i, b := range [2]*budgetLine{pb.up, pb.models[c.req.Model]} {
		if b == nil {
			continue
		}
		passed := (at == inUpstreamLine || at == inModelLine) && stage(i+1) <= at
		if !passed && stage(i+1) != at && !b.shadow && b.line.Waiting() > 0 {
			r.cancelBudgets(c)
			return budgetRefusal{d: b.behindDecision(r.clock()), on: b, stage: stage(i + 1), behind: true}, false
		}
		take := b.Take
		if at != notQueued {
			take = b.Retake // asked once already: not counted as demand again
		}
		tk, d := take(r.clock(), tokens)
		if !d.Allowed && d.Renewal != nil {
			// No block left and a grant on its way: worth a short wait.
			timer := time.NewTimer(maxRenewalWait)
			select {
			case <-d.Renewal:
				tk, d = b.Retake(r.clock(), tokens)
			case <-timer.C:
			}
			timer.Stop()
		}
		if !d.Allowed && b.shadow {
			// Served without it (budgetShadowed): nothing taken.
			if c.shadowBudget == nil {
				c.shadowBudget, c.shadowBudgetD = b, d
			}
			continue
		}
		if !d.Allowed {
			r.cancelBudgets(c)
			return budgetRefusal{d: d, on: b, stage: stage(i + 1)}, false
		}
		c.budgets[c.nBudgets] = budgetTake{b.Budget, tk}
		c.nBudgets++
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
	tl := c.t.c().lim.Limits()
	f := queue.Flow{Key: c.t.name, Cost: 1}
	weight := func(tenant, budget int64) float64 {
		if tenant > 0 && tenant < budget {
			return float64(tenant)
		}
		return float64(budget)
	}
	switch {
	case dim == limiter.Tokens && b.limits.Tokens > 0, b.limits.Requests <= 0 && b.limits.Tokens > 0:
		f.Weight, f.Cost = weight(tl.Tokens, b.limits.Tokens), float64(providerTokens(c))
	case dim == limiter.Requests && b.limits.Requests > 0, b.limits.Concurrency <= 0:
		f.Weight = weight(tl.Requests, b.limits.Requests)
	default:
		f.Weight = weight(tl.Concurrency, b.limits.Concurrency)
	}
	return f
}

// cancelBudgets gives back what the call took of its budgets: it was not
// sent.
func (r *Router) cancelBudgets(c *call) {
	now := r.clock()
	for i := range c.nBudgets {
		c.budgets[i].b.Cancel(now, &c.budgets[i].tk)
	}
	c.nBudgets = 0
	if c.spill.b != nil {
		c.spill.b.Cancel(now, &c.spill.tk)
		c.spill.b = nil
	}
}

// finishBudgets ends the call on its budgets: slots freed, and, when the
// usage is known (settle), tokens settled where the provider settles
// (actual: what it bills); otherwise the charge made at the start stands.
func (r *Router) finishBudgets(c *call, actual int64, settle bool) {
	if c.nBudgets == 0 && c.spill.b == nil {
		return // most calls: not a clock read for nothing
	}
	now := r.clock()
	for i := range c.nBudgets {
		tk := &c.budgets[i].tk
		if !settle {
			actual = tk.Tokens()
		}
		c.budgets[i].b.Finish(now, tk, actual)
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

// learnProvider passes what the provider's answer says is left of its
// limits to the budget the call was charged on (the model's when it has
// one: providers report per model), so that a provider allowing less than
// configured (a key shared with others) shrinks the cluster's budget. A
// 429 without rate-limit headers says nothing is left until retry-after.
func (r *Router) learnProvider(c *call, h *fasthttp.ResponseHeader, status int) {
	if c.nBudgets == 0 {
		return
	}
	b := c.budgets[c.nBudgets-1].b
	pb := r.state.Load().budgets[c.prov]
	model := pb == nil || pb.up == nil || b != pb.up.Budget // charged on a model's budget
	var reqs, toks lease.Observed
	if c.prov.Kind == upstream.Anthropic {
		reqs = observedAnthropic(h, "anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset")
		toks = observedAnthropic(h, "anthropic-ratelimit-tokens-limit", "anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset")
	} else {
		reqs = observedOpenAI(h, "x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests")
		toks = observedOpenAI(h, "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens")
	}
	if c.prov.Kind == upstream.Anthropic {
		// Anthropic's token headers are those of its tightest token
		// limit (input or output), not of the prompt + max_tokens
		// budget kept here: its remaining is listened to, not its limit.
		toks.Limit = 0
	}
	if !model && !pb.single {
		// The provider reports per model: the limit one model's answer
		// states is not the upstream's.
		reqs.Limit, toks.Limit = 0, 0
	}
	if status == fasthttp.StatusTooManyRequests && !reqs.Limited && !toks.Limited {
		after := time.Second
		if secs, err := strconv.Atoi(string(h.Peek("retry-after"))); err == nil && secs > 0 {
			after = time.Duration(secs) * time.Second
		}
		reqs = lease.Observed{Limited: true, Remaining: 0, Reset: after}
	}
	if reqs.Limited || toks.Limited {
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
