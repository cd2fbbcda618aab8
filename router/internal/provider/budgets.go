// Package provider owns the provider's own limits on this node: the
// budgets of [[upstreams]] rpm/tpm/concurrency and
// [[upstreams.model_limits]], the model budgets the providers' answers
// teach (learned.go), the lines of requests waiting for them, what one
// request takes of them and gives back, and their Prometheus series.
//
// The provider's limits are budgets of the whole cluster, leased by each
// node (package lease). The node that calls the upstream — the tenant's
// owner, or an edge on its fallback share — takes a request from the
// upstream's budget and its model's before the tenant's limiter is asked,
// and gives them back at once if the tenant refuses: all three are
// charged, or none.
//
// It knows nothing of calls, tenants' limiters or HTTP answers: a request
// is the few values its budgets read (Request), the node the few
// functions of Config, and what a refusal means (a wait, a 429) is the
// router's.
package provider

import (
	"log/slog"
	"slices"
	"sync"

	"github.com/jonboulle/clockwork"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/router/internal/logmeter"
	"github.com/ringgate/ringgate/upstream"
)

// Config is what the budgets need of the node.
type Config struct {
	Leaser *lease.Leaser
	Clock  clockwork.Clock // the node's: the budgets' time, the lines' waits
	Log    *slog.Logger
	// Members is how many members of the cluster are live: a budget's
	// strict share divides by it.
	Members func() int
	// Keep adds the keys of the other budgets the leaser keeps on a
	// reload (the spills').
	Keep func(keep map[string]bool)
}

// Lines are the lines of requests waiting for the provider's budgets, and
// the limits the providers' answers taught (learned.go): kept across
// reloads.
type Lines struct {
	cfg     Config
	mu      sync.Mutex
	byKey   map[string]*queue.Queue   // by budget key
	dropped []*queue.Queue            // lines a reload dropped, until kicked
	learned map[string]*learnedModels // by upstream name
}

// New makes the node's lines.
func New(c Config) *Lines {
	return &Lines{cfg: c}
}

// Budgets are one upstream's budgets on this node.
type Budgets struct {
	lines  *Lines
	name   string
	single bool             // the upstream serves one model: its answers' limits are the upstream's
	up     *Line            // nil: no upstream-wide limit
	models map[string]*Line // per model, for the models limited
	// learned are the models' limits its answers stated (learned.go);
	// base and shadow are what their budgets are made with.
	learned *learnedModels
	base    lease.Config
	shadow  bool
}

// Line is one budget and the line of requests waiting for it on this
// node: both kept across reloads, by the budget's key.
type Line struct {
	*lease.Budget
	line   *queue.Queue
	limits limiter.Limits // configured: what a tenant's weight in the line is measured on
	what   string         // "upstream x", "model y": named in a refusal
	closed bool           // on_redis_down = closed: nothing to wait for while degraded
	// shadow: the upstream's limits are in shadow mode: a refusal is
	// served (Hold.Shadowed), logged as shadowName.
	shadow     bool
	shadowName string
	meter      logmeter.Meter
}

// Queue is the line of requests waiting for the budget on this node.
func (b *Line) Queue() *queue.Queue { return b.line }

// Limits are the budget's configured limits.
func (b *Line) Limits() limiter.Limits { return b.limits }

// What names the budget in a refusal: "upstream x", "model y".
func (b *Line) What() string { return b.what }

// ShadowName names the budget in shadow mode's counts and log lines.
func (b *Line) ShadowName() string { return b.shadowName }

// ShadowMeter bounds the shadow_refusal lines of the budget.
func (b *Line) ShadowMeter() *logmeter.Meter { return &b.meter }

func onStoreDown(s string) lease.OnStoreDown {
	switch s {
	case config.OnRedisDownOpen:
		return lease.Open
	case config.OnRedisDownClosed:
		return lease.Closed
	}
	return lease.Share
}

// Build gets this node's budgets of every limited upstream and model from
// the leaser (a reload keeps their blocks), and the models' learned ones
// (learned.go), and drops the others. Every upstream has its Budgets: one
// without limits may still learn a model's. provs are cfg's upstreams, in
// its order.
func (ls *Lines) Build(cfg *config.Config, provs []*upstream.Provider) map[*upstream.Provider]*Budgets {
	out := make(map[*upstream.Provider]*Budgets)
	keep := make(map[string]bool)
	var held []*sync.Mutex // the upstreams' learnedModels, until Retain kept their budgets
	defer func() {
		for _, mu := range held {
			mu.Unlock()
		}
	}()
	line := func(c lease.Config, what, name string, shadow bool) *Line {
		keep[c.Key] = true
		return ls.line(c, what, name, shadow)
	}
	for i, uc := range cfg.Upstreams {
		pb := ls.configured(cfg, &uc, line)
		pb.relearn(&uc, line)
		held = append(held, &pb.learned.mu)
		out[provs[i]] = pb
	}
	ls.mu.Lock()
	for name := range ls.learned {
		if !slices.ContainsFunc(cfg.Upstreams, func(u config.Upstream) bool { return u.Name == name }) {
			delete(ls.learned, name)
		}
	}
	for key, q := range ls.byKey {
		if !keep[key] {
			// Its waiters are decided on the new config once it is in
			// force (Kick).
			delete(ls.byKey, key)
			ls.dropped = append(ls.dropped, q)
		}
	}
	ls.mu.Unlock()
	if ls.cfg.Keep != nil {
		ls.cfg.Keep(keep) // a reload keeps the spills
	}
	ls.cfg.Leaser.Retain(keep)
	return out
}

// configured is the upstream's budgets of its configured limits.
func (ls *Lines) configured(cfg *config.Config, uc *config.Upstream, line func(c lease.Config, what, name string, shadow bool) *Line) *Budgets {
	pb := &Budgets{lines: ls, name: uc.Name, models: make(map[string]*Line), single: len(uc.Models) <= 1,
		shadow: uc.Mode == config.ModeShadow, learned: ls.learnedOf(uc.Name)}
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
	return pb
}

// relearn puts the learned budgets on the new window and mode; a model
// now configured is on its configured limit. It locks the learnedModels,
// held until the leaser kept them (Build).
func (pb *Budgets) relearn(uc *config.Upstream, line func(c lease.Config, what, name string, shadow bool) *Line) {
	l := pb.learned
	l.mu.Lock()
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
		nb.Line = line(c, lb.what, lb.shadowName, pb.shadow)
		l.set(model, &nb)
	}
}

// now is the node's clock in Unix ns.
func (ls *Lines) now() int64 { return ls.cfg.Clock.Now().UnixNano() }

// line is the node's budget for c, from the leaser, with its line (kept
// across reloads by the budget's key).
func (ls *Lines) line(c lease.Config, what, name string, shadow bool) *Line {
	b := ls.cfg.Leaser.Budget(c, ls.cfg.Members)
	ls.mu.Lock()
	if ls.byKey == nil {
		ls.byKey = make(map[string]*queue.Queue)
	}
	q := ls.byKey[c.Key]
	if q == nil {
		q = &queue.Queue{Clock: ls.cfg.Clock}
		ls.byKey[c.Key] = q
	}
	ls.mu.Unlock()
	b.Watch(q.Kick, q.Waiting, lineBacklog(q))
	return &Line{Budget: b, line: q, limits: c.Limits, what: what, closed: c.OnStoreDown == lease.Closed, shadow: shadow, shadowName: name}
}

// limited reports whether any budget of the upstream's may take a request.
func (pb *Budgets) limited() bool {
	return pb != nil && (pb.up != nil || len(pb.models) > 0 || len(pb.learned.all()) > 0)
}

// lineBacklog reports the requests waiting in a budget's line by flow
// (tenant) and band, for the demand the budget reports.
func lineBacklog(q *queue.Queue) lease.Backlog {
	return func(fn func(key string, band, waiting int)) {
		q.EachFlow(func(key string, c queue.Class, n int) { fn(key, int(c), n) })
	}
}

// Kick has the head of every budget's line try again, and of every line a
// reload dropped: the config in force changed.
func (ls *Lines) Kick() {
	ls.mu.Lock()
	lines := make([]*queue.Queue, 0, len(ls.byKey)+len(ls.dropped))
	for _, q := range ls.byKey {
		lines = append(lines, q)
	}
	lines = append(lines, ls.dropped...)
	ls.dropped = nil
	ls.mu.Unlock()
	for _, q := range lines {
		q.Kick()
	}
}
