package router

import (
	"github.com/ringgate/ringgate/admit"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/levels"
	"github.com/ringgate/ringgate/router/internal/provider"
	"github.com/ringgate/ringgate/router/internal/spill"
	"github.com/ringgate/ringgate/router/internal/wait"
)

// A call's rooms, in the order its decision asks them: its provider's
// budgets, then its tenant's limits (or, spilled, its spill's budget),
// then the levels above its tenant. Each is the call seen as one source of
// room (package admit): a conversion of the call's pointer, so building
// them allocates nothing, and each keeps what it took in the call.
type (
	providerRoom call // the upstream's and the model's budgets (budgets.go)
	tenantRoom   call // the tenant's limiter: its owner's, a fallback share or the catch-up share
	spillRoom    call // a spilled tenant's budget, and its mirror and ledger (package spill)
	levelsRoom   call // the tenant's model and team limits (package levels)
)

// Where each room sits in decide's list: an outcome's At names it.
const (
	atProvider = iota
	atTenant   // the tenant's limiter, or its spill
	atLevels
)

// decide is the one decision on c: every room it counts on, all or none.
// The first try and every try from a line make it alike; what a refusal
// means (a wait, a 429, a hop) is the caller's.
func (r *Router) decide(c *call) admit.Outcome {
	var buf [3]admit.Room
	rooms := append(buf[:0], (*providerRoom)(c))
	if c.sp != nil {
		rooms = append(rooms, (*spillRoom)(c))
	} else {
		rooms = append(rooms, (*tenantRoom)(c), (*levelsRoom)(c))
	}
	return admit.Decide(rooms)
}

// Take takes the call from its provider's budgets (provider.Hold.Take);
// a refusal is kept in c.bud.refusal.
func (p *providerRoom) Take() admit.Verdict {
	c := (*call)(p)
	if !c.bud.Limited() {
		return admit.Taken // the request is built only for a budget to read
	}
	req := c.budgetRequest()
	br, ok := c.bud.Take(&req)
	if ok {
		return admit.Taken
	}
	c.bud.refusal = br
	if br.Behind {
		return admit.Behind
	}
	return admit.Refused
}

func (p *providerRoom) Cancel() { (*call)(p).bud.Cancel() }

// Take charges the call on its tenant's limiter. c.d keeps what the
// limiter said. A tenant in shadow mode that refuses lets it go on
// uncharged.
func (tr *tenantRoom) Take() admit.Verdict {
	c := (*call)(tr)
	if c.behind() {
		return admit.Behind
	}
	(*levelsNode)(c.r).Admit(c.lim, c.lim == c.t.Core().Lim, c.r.clock(), int64(c.res.Total), &c.tk, &c.d)
	switch {
	case c.d.Moved:
		return admit.Moved
	case c.d.Allowed:
		return admit.Taken
	case c.t.Shadow:
		return admit.Shadowed
	}
	return admit.Refused
}

// Cancel takes the tenant's charge back; what it frees may be what a
// waiting head of its lines was refused for.
func (tr *tenantRoom) Cancel() {
	c := (*call)(tr)
	levels.CancelOn((*levelsNode)(c.r), c.t, c.lim, &c.tk)
	c.t.Core().Queue.Kick()
	c.t.Core().FbQueue.Kick()
}

// behind reports whether others wait in a line of its tenant's that c must
// not pass. On its first try: its tenant's line, or a level's (c.refusedLevel
// names it), when c may wait itself. From a provider's line: its tenant's,
// where its turn has not come. From its tenant's line or a level's it goes
// on: its turn came there.
func (c *call) behind() bool {
	t := c.t
	switch c.at {
	case wait.NotQueued:
		if t.QueueWait(c.class) <= 0 {
			return false
		}
		if line := t.LineFor(c.lim, c.hops); line != nil && line.Waiting() > 0 {
			return true
		}
		for i := range c.levels.Len() {
			if line := c.levelLine(i); line != nil && line.Waiting() > 0 {
				c.refusedLevel = i + 1
				return true
			}
		}
	case wait.InUpstreamLine, wait.InModelLine:
		line := t.LineFor(c.lim, c.hops)
		return line != nil && line.Waiting() > 0
	}
	return false
}

// Take takes the call from its spill's budget and, once taken, charges
// the spill's mirror and enters the call in the ledger the owner is told
// from, under the spill's lock, so an ending spill counts it. Moved: the
// spill ended or is ending (fenced), and the call is decided the usual
// way. A spill's refusal is final: only its provider's budgets are
// waited for, so from a provider's line it goes behind its spill's line.
func (sr *spillRoom) Take() admit.Verdict {
	c := (*call)(sr)
	r, sp, t := c.r, c.sp, c.t
	if (c.at == wait.InUpstreamLine || c.at == wait.InModelLine) && sp.Line.Waiting() > 0 {
		return admit.Behind
	}
	sp.RLock()
	defer sp.RUnlock()
	if r.spills.Node.Lapsed(sp) {
		return admit.Moved
	}
	tk, bd := r.spills.Node.Take(sp, int64(c.res.Total), c.at != wait.NotQueued, provider.MaxRenewalWait)
	if bd.Allowed {
		c.spill = budgetTake{b: sp.Budget, tk: tk}
	}
	if !bd.Allowed && sp.Budget.Fenced() {
		return admit.Moved
	}
	c.d = spill.Decision(t.Limits, &bd, r.state.Load().Cfg.Limits.Window)
	switch {
	case bd.Allowed:
		c.tk, _ = c.lim.Admit(r.clock(), int64(c.res.Total)) // the mirror: no limits
		c.fb = r.fb.Admitted(t, &c.tk, sp.Epoch)
		return admit.Taken
	case t.Shadow:
		return admit.Shadowed
	}
	c.d.TooLarge = spillTooLarge(t, c)
	return admit.Refused
}

// Cancel gives back the spill's budget and the mirror's charge, and tells
// the ledger the call was taken back.
func (sr *spillRoom) Cancel() {
	c := (*call)(sr)
	if c.fb == nil {
		return // shadowed: nothing taken
	}
	now := c.r.clock()
	d := limiter.DeltaOf(&c.tk)
	d.Requests, d.Tokens, d.Slots = -d.Requests, -d.Tokens, -d.Slots
	c.lim.Cancel(now, &c.tk)
	c.r.fb.Finished(c.t, c.fb, d)
	c.fb = nil
	if c.spill.b != nil {
		c.spill.b.Cancel(now, &c.spill.tk)
		c.spill.b = nil
	}
}
