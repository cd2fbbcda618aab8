package provider

import (
	"time"

	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
)

// MaxRenewalWait bounds how long a request whose budget has no block left
// waits for a grant in flight (the first request after an idle spell, say).
const MaxRenewalWait = 15 * time.Millisecond

// Request is what the budgets read of a request.
type Request struct {
	Model  string
	Tokens int64 // what the provider counts at the start (Tokens)
	// Tenant and Limits are its tenant's name and configured limits,
	// read without the limiter's lock: its flow and weights in a line.
	Tenant string
	Limits limiter.Limits
	Band   queue.Class // its class: its band in the budgets' division
	At     At          // where it waits
}

// Tokens is what the provider counts against its token limit when the
// request starts: OpenAI the prompt and max_tokens (or the completion
// estimate, whichever is larger); Anthropic the prompt and max_tokens,
// corrected to the usage at the end (lease.Config.Settles).
func Tokens(prompt, completion, maxTokens, choices int) int64 {
	if m := maxTokens * max(1, choices); m > completion {
		completion = m
	}
	return int64(prompt + completion)
}

// At is where a request waits among the budgets' lines. From the
// upstream's line to the model's it goes forward only: the head of the
// model's line does not go behind the waiters of the upstream's, it had
// its turn there (it may still be refused there and wait again). From
// a line not the provider's (its tenant's, where it waited for its own
// limits) it goes behind every budget's waiters: its turn there came for
// its tenant, not for the provider.
type At uint8

const (
	NotInLine      At = iota // its first try, or a line not the provider's
	InUpstreamLine           // the upstream's budget's line
	InModelLine              // its model's budget's line
)

// Refusal is why a request did not get its provider budgets: the budget
// On refused (D), or others wait in its line (Behind: the request goes
// after them, or is refused if it may not wait). At is On's line.
type Refusal struct {
	D      lease.Decision
	On     *Line
	At     At
	Behind bool
}

// Waitable reports whether the request refused can wait for room with
// left of its wait budget: behind others, or refused with room due before
// it is spent (not a closed budget with Redis down: nothing frees then).
// mayWait is the node's rule of when a refused request may wait for room.
func (br *Refusal) Waitable(left time.Duration, mayWait func(concurrency bool, retryAfter, left time.Duration) bool) bool {
	if br.Behind {
		return true
	}
	if br.D.Degraded && br.On.closed {
		return false
	}
	return mayWait(br.D.Limited == limiter.Concurrency, br.D.RetryAfter, left)
}

// take is what one request took of one budget.
type take struct {
	b     *lease.Budget
	tk    lease.Ticket
	which int // 0: its upstream's budget, 1: its model's
}

// Hold is what a request holds of its provider's budgets.
type Hold struct {
	pb    *Budgets
	takes [2]take
	n     int
	// asked: the request is counted in the demand of its upstream's (0)
	// and model's (1) budget (Take).
	asked [2]bool
	// shadow is the budget in shadow mode that refused the request
	// (shadowD), which is served without it.
	shadow  *Line
	shadowD lease.Decision
}

// NewHold is a request's hold on pb, nothing taken yet.
func NewHold(pb *Budgets) Hold { return Hold{pb: pb} }

// Held reports whether the request holds anything of its budgets.
func (h *Hold) Held() bool { return h.n > 0 }

// Shadowed is the budget in shadow mode that refused the request, and
// what it said; nil: none.
func (h *Hold) Shadowed() (*Line, lease.Decision) { return h.shadow, h.shadowD }

// Limited reports whether the call's provider has a budget to take from:
// with none, there is nothing to ask (Take would take nothing).
func (h *Hold) Limited() bool { return h.pb.limited() }

// Take takes the request from its upstream's and model's budgets, unless
// others wait for one it has not passed yet (req.At is where the request
// waits: the head of that line goes first). On a refusal it gives back
// what it took.
func (h *Hold) Take(req *Request) (Refusal, bool) {
	pb, at := h.pb, req.At
	if !pb.limited() {
		return Refusal{}, true
	}
	clock := pb.lines.now
	h.shadow = nil
	for i, b := range [2]*Line{pb.up, pb.model(req.Model)} {
		if b == nil {
			continue
		}
		passed := (at == InUpstreamLine || at == InModelLine) && At(i+1) <= at
		if !passed && At(i+1) != at && !b.shadow && b.line.Waiting() > 0 {
			h.Cancel()
			if !h.asked[i] {
				// Wanted from its arrival, not from its turn: the
				// budget's division follows what tenants ask.
				h.asked[i] = true
				f := b.leaseFlow(req)
				b.AskFor(clock(), req.Tokens, &f)
			}
			return Refusal{D: b.behindDecision(clock()), On: b, At: At(i + 1), Behind: true}, false
		}
		tk, d := h.takeOn(b, i, req)
		if !d.Allowed && b.shadow {
			// Served without it (Shadowed): nothing taken.
			if h.shadow == nil {
				h.shadow, h.shadowD = b, d
			}
			continue
		}
		if !d.Allowed {
			h.Cancel()
			return Refusal{D: d, On: b, At: At(i + 1)}, false
		}
		h.takes[h.n] = take{b.Budget, tk, i}
		h.n++
	}
	return Refusal{}, true
}

// takeOn takes the request from budget b, its i-th.
func (h *Hold) takeOn(b *Line, i int, req *Request) (lease.Ticket, lease.Decision) {
	clock := h.pb.lines.now
	// A request counts once in a budget's demand, however many tries it
	// takes: asked until it is cancelled there (refused by another
	// limit, which then bounds it).
	f := b.leaseFlow(req)
	var tk lease.Ticket
	var d lease.Decision
	if h.asked[i] {
		tk, d = b.RetakeFor(clock(), req.Tokens, &f)
	} else {
		tk, d = b.TakeFor(clock(), req.Tokens, &f)
	}
	h.asked[i] = true
	if !d.Allowed && d.Renewal != nil {
		// No block left and a grant on its way: worth a short wait.
		timer := h.pb.lines.cfg.Clock.NewTimer(MaxRenewalWait)
		select {
		case <-d.Renewal:
			tk, d = b.RetakeFor(clock(), req.Tokens, &f)
		case <-timer.Chan():
		}
		timer.Stop()
	}
	return tk, d
}

// behindDecision is the refusal of a request that finds others waiting for
// the budget and may not wait itself: the room that frees is theirs.
func (b *Line) behindDecision(now int64) lease.Decision {
	d := lease.Decision{Limited: limiter.Concurrency, RetryAfter: time.Second, Degraded: b.Degraded(), Storeless: b.Storeless()}
	switch {
	case b.limits.Requests > 0:
		d.Limited, d.RetryAfter = limiter.Requests, b.RetryAfter(now)
	case b.limits.Tokens > 0:
		d.Limited, d.RetryAfter = limiter.Tokens, b.RetryAfter(now)
	}
	return d
}

// Flow is a tenant's flow in a budget's line, for a request refused on
// dim: its weight is its own limit on that dimension, capped at the
// budget's (a tenant allowed more than the provider is allowed the
// provider; one without a limit there, the same), so tenants sharing a
// provider's limit split it as their own limits do, whatever each sends.
// Refused on tokens, a request costs its tokens.
func (b *Line) Flow(req *Request, dim limiter.Dimension) queue.Flow {
	w := b.weights(req)
	f := queue.Flow{Key: req.Tenant, Cost: 1}
	switch {
	case dim == limiter.Tokens && b.limits.Tokens > 0, b.limits.Requests <= 0 && b.limits.Tokens > 0:
		f.Weight, f.Cost = w.Tokens, float64(req.Tokens)
	case dim == limiter.Requests && b.limits.Requests > 0, b.limits.Concurrency <= 0:
		f.Weight = w.Requests
	default:
		f.Weight = w.Concurrency
	}
	return f
}

// weights are a tenant's weights on a budget, for its line (Flow) and
// for the budget's division among the cluster's tenants (leaseFlow): on
// each dimension its own limit, capped at the budget's.
func (b *Line) weights(req *Request) lease.Weights {
	tl := req.Limits // configured, read without the limiter's lock: per request
	weight := func(tenant, budget int64) float64 {
		if tenant > 0 && tenant < budget {
			return float64(tenant)
		}
		return float64(max(budget, 1))
	}
	return lease.Weights{Requests: weight(tl.Requests, b.limits.Requests), Tokens: weight(tl.Tokens, b.limits.Tokens),
		Concurrency: weight(tl.Concurrency, b.limits.Concurrency)}
}

// leaseFlow is the request's flow in the budget's division: its tenant,
// in the band of its class, with its weights.
func (b *Line) leaseFlow(req *Request) lease.Flow {
	return lease.Flow{Key: req.Tenant, Band: int(req.Band), Weight: b.weights(req)}
}

// Cancel gives back what the request took of its provider's budgets: it
// was not sent.
func (h *Hold) Cancel() {
	if h.n == 0 {
		return
	}
	now := h.pb.lines.now()
	for i := range h.n {
		h.takes[i].b.Cancel(now, &h.takes[i].tk) // its ask too
		h.asked[h.takes[i].which] = false
	}
	h.n = 0
}

// Finish ends the request on its budgets at now: slots freed, and, when
// the usage is known (settle), tokens settled where the provider settles
// (actual: what it bills); otherwise the charge made at the start stands.
func (h *Hold) Finish(now, actual int64, settle bool) {
	for i := range h.n {
		tk := &h.takes[i].tk
		if !settle {
			actual = tk.Tokens()
		}
		h.takes[i].b.Finish(now, tk, actual)
	}
}
