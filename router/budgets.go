package router

import (
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/limiter"
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
	single bool                     // the upstream serves one model: its answers' limits are the upstream's
	up     *lease.Budget            // nil: no upstream-wide limit
	models map[string]*lease.Budget // per model, for the models limited
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
	for i, uc := range cfg.Upstreams {
		pb := &provBudgets{models: make(map[string]*lease.Budget), single: len(uc.Models) <= 1}
		base := lease.Config{Window: cfg.Limits.Window, Settles: uc.Kind == config.KindAnthropic, OnStoreDown: onStoreDown(uc.OnRedisDown)}
		if uc.RPM > 0 || uc.TPM > 0 || uc.Concurrency > 0 {
			c := base
			c.Key = "up:" + uc.Name
			c.Limits = limiter.Limits{Requests: int64(uc.RPM), Tokens: int64(uc.TPM), Concurrency: int64(uc.Concurrency)}
			pb.up = r.leaser.Budget(c, members)
			keep[c.Key] = true
		}
		for _, ml := range uc.ModelLimits {
			c := base
			c.Key = "up:" + uc.Name + ":model:" + ml.Model
			c.Limits = limiter.Limits{Requests: int64(ml.RPM), Tokens: int64(ml.TPM), Concurrency: int64(ml.Concurrency)}
			pb.models[ml.Model] = r.leaser.Budget(c, members)
			keep[c.Key] = true
		}
		if pb.up != nil || len(pb.models) > 0 {
			out[provs[i]] = pb
		}
	}
	if st := r.state.Load(); st != nil {
		st.spillKeys(keep) // a reload keeps the spills
	}
	r.leaser.Retain(keep)
	return out
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

// takeBudgets takes the request from its upstream's and model's budgets. On
// a refusal it gives back what it took and reports the refusal.
func (r *Router) takeBudgets(st *state, c *call) (lease.Decision, string, bool) {
	pb := st.budgets[c.prov]
	if pb == nil {
		return lease.Decision{Allowed: true}, "", true
	}
	tokens := providerTokens(c)
	for i, b := range [2]*lease.Budget{pb.up, pb.models[c.req.Model]} {
		if b == nil {
			continue
		}
		tk, d := b.Take(r.clock(), tokens)
		if !d.Allowed && d.Renewal != nil {
			// No block left and a grant on its way: worth a short wait.
			timer := time.NewTimer(maxRenewalWait)
			select {
			case <-d.Renewal:
				tk, d = b.Take(r.clock(), tokens)
			case <-timer.C:
			}
			timer.Stop()
		}
		if !d.Allowed {
			r.cancelBudgets(c)
			what := "upstream " + c.prov.Name // named only on a refusal: no allocation otherwise
			if i == 1 {
				what = "model " + c.req.Model
			}
			return d, what, false
		}
		c.budgets[c.nBudgets] = budgetTake{b, tk}
		c.nBudgets++
	}
	return lease.Decision{Allowed: true}, "", true
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
	now := r.clock()
	for i := range c.nBudgets {
		tk := &c.budgets[i].tk
		if !settle {
			actual = tk.Tokens()
		}
		c.budgets[i].b.Finish(now, tk, actual)
	}
	c.nBudgets = 0
	if c.spill.b != nil {
		// The tenant's own tokens settle on the usage, as its limiter does.
		if !settle {
			actual = c.spill.tk.Tokens()
		}
		c.spill.b.Finish(now, &c.spill.tk, actual)
		c.spill.b = nil
	}
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
	model := pb == nil || b != pb.up // charged on a model's budget
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
