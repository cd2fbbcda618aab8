package provider

import (
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/upstream"
)

// A provider states its limits per model: OpenAI's x-ratelimit-limit-* and
// Anthropic's anthropic-ratelimit-*-limit describe the limit of the model
// the request was for. On an upstream serving several models, an answer for
// model M whose stated limit is below what is applied to M (its upstream's
// limit, or none) makes a learned budget for M, leased and divided like a
// configured [[upstreams.model_limits]] entry: a key shared with others or
// on a lower tier is respected without configuring it. A later answer that
// states a lower or higher limit still below the applied one moves the
// budget to it; one that states a limit no lower than the applied one
// forgets it. A model with a configured limit learns on that budget
// instead (lease.Budget.Observe), as a single-model upstream learns on the
// upstream's.

// learnedModels are an upstream's learned model budgets. The map is
// replaced, never changed, so a request reads it with one atomic load;
// writers hold mu. It outlives reloads (Lines.learnedOf), and holds what
// its budgets are made with in the config in force: a reload sets it, mu
// held from before it rebuilds the budgets until the leaser kept them, so
// a budget learned meanwhile is made on the new config and kept.
type learnedModels struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]*learnedBudget]

	name       string
	base       lease.Config
	applied    limiter.Limits  // the upstream's own limits (0: none)
	shadow     bool            // the upstream is in shadow mode
	configured map[string]bool // models with [[upstreams.model_limits]]
}

// learnedBudget is one model's learned budget and where it came from.
type learnedBudget struct {
	*Line
	limits limiter.Limits // as stated: 0 on a dimension not learned
	from   string         // the header that stated it
	since  time.Time
}

func (l *learnedModels) get(model string) *learnedBudget {
	if m := l.m.Load(); m != nil {
		return (*m)[model]
	}
	return nil
}

func (l *learnedModels) all() map[string]*learnedBudget {
	if m := l.m.Load(); m != nil {
		return *m
	}
	return nil
}

// set replaces the model's entry (nil: removes it); l.mu is held.
func (l *learnedModels) set(model string, b *learnedBudget) {
	m := maps.Clone(l.all())
	if m == nil {
		m = map[string]*learnedBudget{}
	}
	if b == nil {
		delete(m, model)
	} else {
		m[model] = b
	}
	l.m.Store(&m)
}

// learnedOf is the upstream's learned budgets, kept across reloads.
func (ls *Lines) learnedOf(upstream string) *learnedModels {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.learned == nil {
		ls.learned = map[string]*learnedModels{}
	}
	l := ls.learned[upstream]
	if l == nil {
		l = &learnedModels{}
		ls.learned[upstream] = l
	}
	return l
}

// model is the budget of model a request is charged on besides its
// upstream's: its configured limit, or a learned one; nil: none.
func (pb *Budgets) model(name string) *Line {
	if b := pb.models[name]; b != nil {
		return b
	}
	if lb := pb.learned.get(name); lb != nil {
		return lb.Line
	}
	return nil
}

// learnModel keeps model's learned budget in line with what an answer for
// it stated (reqs, toks: their Limit), and passes the answer's remaining
// on to it. It reports whether the model has a learned budget now.
func (ls *Lines) learnModel(l *learnedModels, model string, reqs, toks lease.Observed, from string) bool {
	l.mu.Lock()
	if l.configured[model] {
		l.mu.Unlock() // configured since: the budget the reload made hears it next time
		return true
	}
	want, said := l.stated(model, reqs, toks)
	lb := l.get(model)
	switch {
	case !said:
	case want == (limiter.Limits{}):
		if lb != nil {
			l.set(model, nil)
			ls.dropLine(lb.Key())
			ls.cfg.Leaser.Drop(lb.Key())
			ls.cfg.Log.Info("lease", "phase", "forgotten", "budget", lb.Key(), "upstream", l.name, "model", model)
		}
		lb = nil
	case lb == nil || want != lb.limits:
		c := l.base
		c.Key, c.Limits = "up:"+l.name+":learned:"+model, want
		nb := &learnedBudget{Line: ls.line(c, "model "+model, "upstream/"+l.name+"/model/"+model, l.shadow),
			limits: want, from: from, since: ls.cfg.Clock.Now()}
		l.set(model, nb)
		lb = nb
		ls.cfg.Log.Info("lease", "phase", "learned", "budget", c.Key, "upstream", l.name, "model", model,
			"requests", want.Requests, "tokens", want.Tokens, "from", from)
	}
	l.mu.Unlock()
	if lb != nil {
		lb.Observe(ls.now(), reqs, toks)
	}
	return lb != nil
}

// stated is the limits model's learned budget should have after an answer
// that stated reqs' and toks' limits: on each dimension stated, the limit
// when it is below the upstream's (or the upstream has none), else none;
// the others as they were. said is false when the answer stated no limit.
// l.mu is held.
func (l *learnedModels) stated(model string, reqs, toks lease.Observed) (want limiter.Limits, said bool) {
	if lb := l.get(model); lb != nil {
		want = lb.limits
	}
	lower := func(o lease.Observed, applied int64, to *int64) {
		if !o.Limited || o.Limit <= 0 {
			return
		}
		said = true
		if applied > 0 && o.Limit >= applied {
			*to = 0
			return
		}
		*to = o.Limit
	}
	lower(reqs, l.applied.Requests, &want.Requests)
	lower(toks, l.applied.Tokens, &want.Tokens)
	return want, said
}

// dropLine forgets a budget's line; its waiters are decided again
// (Kick).
func (ls *Lines) dropLine(key string) {
	ls.mu.Lock()
	if q := ls.byKey[key]; q != nil {
		delete(ls.byKey, key)
		ls.dropped = append(ls.dropped, q)
	}
	ls.mu.Unlock()
	ls.Kick()
}

// Learn passes what the provider's answer for a request for model says of
// its limits (h, status; kind is the provider's dialect) to the budget
// they are about: the model's configured one, the upstream's when it
// serves one model, else the model's learned one (learnModel), made when
// the answer states a limit below the applied one. A provider allowing
// less than configured (a key shared with others, a lower tier) so shrinks
// the cluster's budget. A 429 without rate-limit headers says nothing is
// left until retry-after.
func (pb *Budgets) Learn(kind upstream.Kind, model string, h *fasthttp.ResponseHeader, status int) {
	if pb == nil {
		return
	}
	reqs, toks, from := observed(kind, h)
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
	var b *Line
	switch {
	case pb.models[model] != nil:
		b = pb.models[model]
	case pb.single:
		b = pb.up
	case pb.lines.learnModel(pb.learned, model, reqs, toks, from):
		return
	default:
		// No budget of the model's: what is left of it, low, is taken
		// from the upstream's (the limit it states is the model's).
		b = pb.up
		reqs.Limit, toks.Limit = 0, 0
	}
	if b != nil {
		b.Observe(pb.lines.now(), reqs, toks)
	}
}

// observed is what the answer's headers say of the requests and tokens
// left, in the provider's dialect, and the header its limit is read from.
func observed(kind upstream.Kind, h *fasthttp.ResponseHeader) (reqs, toks lease.Observed, from string) {
	if kind == upstream.Anthropic {
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
	return reqs, toks, from
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
