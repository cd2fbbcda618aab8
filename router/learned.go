package router

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/limiter"
)

// A provider states its limits per model: OpenAI's x-ratelimit-limit-* and
// Anthropic's anthropic-ratelimit-*-limit describe the limit of the model
// the call was for. On an upstream serving several models, an answer for
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
// writers hold mu. It outlives reloads (Router.learnedOf), and holds what
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
	*budgetLine
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
func (r *Router) learnedOf(upstream string) *learnedModels {
	r.lines.mu.Lock()
	defer r.lines.mu.Unlock()
	if r.lines.learned == nil {
		r.lines.learned = map[string]*learnedModels{}
	}
	l := r.lines.learned[upstream]
	if l == nil {
		l = &learnedModels{}
		r.lines.learned[upstream] = l
	}
	return l
}

// model is the budget of model a request is charged on besides its
// upstream's: its configured limit, or a learned one; nil: none.
func (pb *provBudgets) model(name string) *budgetLine {
	if b := pb.models[name]; b != nil {
		return b
	}
	if lb := pb.learned.get(name); lb != nil {
		return lb.budgetLine
	}
	return nil
}

// learnModel keeps model's learned budget in line with what an answer for
// it stated (reqs, toks: their Limit), and passes the answer's remaining
// on to it. It reports whether the model has a learned budget now.
func (r *Router) learnModel(l *learnedModels, model string, reqs, toks lease.Observed, from string) bool {
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
			r.dropLine(lb.Key())
			r.leaser.Drop(lb.Key())
			r.log.Info("lease", "phase", "forgotten", "budget", lb.Key(), "upstream", l.name, "model", model)
		}
		lb = nil
	case lb == nil || want != lb.limits:
		c := l.base
		c.Key, c.Limits = "up:"+l.name+":learned:"+model, want
		nb := &learnedBudget{budgetLine: r.budgetLine(c, "model "+model, "upstream/"+l.name+"/model/"+model, l.shadow),
			limits: want, from: from, since: time.Now()}
		l.set(model, nb)
		lb = nb
		r.log.Info("lease", "phase", "learned", "budget", c.Key, "upstream", l.name, "model", model,
			"requests", want.Requests, "tokens", want.Tokens, "from", from)
	}
	l.mu.Unlock()
	if lb != nil {
		lb.Observe(r.clock(), reqs, toks)
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
// (kickBudgetLines).
func (r *Router) dropLine(key string) {
	r.lines.mu.Lock()
	if q := r.lines.byKey[key]; q != nil {
		delete(r.lines.byKey, key)
		r.lines.dropped = append(r.lines.dropped, q)
	}
	r.lines.mu.Unlock()
	r.kickBudgetLines()
}
