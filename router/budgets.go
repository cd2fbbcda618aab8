package router

import (
	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/router/internal/provider"
)

// The provider's own limits ([[upstreams]] rpm/tpm/concurrency and
// [[upstreams.model_limits]]) are budgets of the whole cluster, leased by
// each node, which package provider keeps (Router.lines). Here is what a
// call is to them, and the answer of their refusal.

// budgetTake is what a call took of its spill's budget (package spill).
type budgetTake struct {
	b  *lease.Budget
	tk lease.Ticket
}

// budgetRequest is the call as its provider's budgets read it: its
// tenant's configured limits read without the limiter's lock, per
// request.
func (c *call) budgetRequest() provider.Request {
	return provider.Request{Model: c.req.Model, Tokens: provider.Tokens(c.res.Prompt, c.res.Completion, c.req.MaxTokens, c.req.Choices),
		Tenant: c.t.Name, Limits: c.t.Limits, Band: c.class, At: c.at.BudgetAt()}
}

// budgetFlow is the call's flow in the line of the budget that refused it
// (br).
func (c *call) budgetFlow(br *provider.Refusal) queue.Flow {
	req := c.budgetRequest()
	return br.On.Flow(&req, br.D.Limited)
}

// cancelBudgets gives back what the call took of its provider's budgets
// and of its spill's: it was not sent.
func (r *Router) cancelBudgets(c *call) {
	c.bud.Cancel()
	if c.spill.b != nil {
		c.spill.b.Cancel(r.clock(), &c.spill.tk)
		c.spill.b = nil
	}
}

// finishBudgets ends the call on its budgets: slots freed, and, when the
// usage is known (settle), tokens settled where the provider settles
// (actual: what it bills); otherwise the charge made at the start stands.
func (r *Router) finishBudgets(c *call, actual int64, settle bool) {
	if !c.bud.Held() && c.spill.b == nil {
		return // most calls: not a clock read for nothing
	}
	now := r.clock()
	c.bud.Finish(now, actual, settle)
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

// learnProvider passes what the provider's answer says of its limits to
// the budget they are about (provider.Budgets.Learn).
func (r *Router) learnProvider(c *call, h *fasthttp.ResponseHeader, status int) {
	r.state.Load().Budgets[c.prov].Learn(c.prov.Kind, c.req.Model, h, status)
}
