// Package tenant owns the configured entities with limits (a tenant, a
// team, a tenant's limit on one model), their cores (what a node counts of
// each: its limiter, fallback ledger, spill holder and lines), made at
// first use, and the config in force (State), built from a config and put
// in force by a reload (Cores.Install), and the depth of its tenants'
// queues at scrape time (QueueCollector).
//
// It knows nothing of HTTP, hops, the ring's ownership or decisions: the
// router reads an entity's limits and core here and decides on them
// itself; what the router must hear of the tenants (a spill's count, a
// limiter's first change) is given as Hooks.
package tenant

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/router/internal/away"
	"github.com/ringgate/ringgate/router/internal/logmeter"
	"github.com/ringgate/ringgate/router/internal/metrics"
	"github.com/ringgate/ringgate/router/internal/spill"
)

// Tenant is one configured tenant (or level of limits): its config, and
// its core, the part that counts, made at its first use.
type Tenant struct {
	Name     string
	Priority string
	Limits   limiter.Limits
	// ref holds the core, nil until the tenant's first use on this node;
	// shared by the tenant's structs across reloads (a request holding an
	// older struct counts on the same core).
	ref   *coreRef
	cores *Cores
	// counts are the tenant's metric series, made at its first count
	// (Counters): a node serves few of many configured tenants.
	metrics *metrics.Metrics
	counts  atomic.Pointer[metrics.Counters]

	// Gate holds requests while this node, the new owner, loads the
	// tenant's state; nil when open.
	Gate atomic.Pointer[Gate]

	// OwnedUntil is when this node stopped owning the tenant (Unix ns),
	// ownedNow while it owns it, 0 if it never did.
	OwnedUntil atomic.Int64

	// Arrivals count the tenant's requests at its owner, for the
	// spillover rate.
	Arrivals atomic.Int64
	Listed   atomic.Bool // in the router's arrived list

	// waits are the wait budgets by class in the tenant's lines.
	waits [2]time.Duration

	// Kind says what the entity is (KindTenant, KindTeam, KindModel);
	// Team and Models are a tenant's other levels of limits (Levels),
	// Members a team's or a model limit's tenants, whose lines wait for
	// its room too.
	Kind    uint8
	Label   string // "team <name>", "model <model>": a level in messages
	Team    *Tenant
	Models  map[string]*Tenant
	Members []*Tenant

	// Shadow: the tenant's limits are in shadow mode (router/shadow.go).
	Shadow    bool
	ShadowLog logmeter.Meter
	// RefusedLog bounds the tenant's refused lines (package reqlog).
	RefusedLog logmeter.Meter
}

// Core is what a tenant counts on this node. It is made at the tenant's
// first use, not with its config: a node configured with 100 000 tenants
// owns a third of them and serves fewer, and an idle tenant costs its
// config alone. A core is never dropped: a frozen limiter says where the
// tenant went, and must not be forgotten.
type Core struct {
	Lim *limiter.Tenant
	// The fallback share (Fb.Share, made at its first use) enforces this
	// node's strict share of the limits while the tenant's owner cannot be
	// reached; InFallback marks the episode so it is logged once.
	InFallback atomic.Bool
	FallbackMu sync.Mutex // serialises the start of an episode
	// FbStartLog bounds the start lines of episodes that restart for the
	// same owner; FbLogged says whether this episode's start was logged,
	// so that its end is logged with it or not at all. An end may read
	// the next episode's (a start right after the end's swap): a line's
	// pairing, never a count.
	FbStartLog logmeter.Meter
	FbLogged   atomic.Bool
	// Fb keeps the fallback share and the admissions of fallback
	// episodes until the owner is told (package away).
	Fb *away.Ledger
	// Seen is the owner's usage as its last relayed answer reported it,
	// to seed a fallback share with (package away).
	Seen away.Seen
	// Spill is the tenant's spillover as this node serves it (package spill).
	Spill *spill.Holder
	// Queue is the line of requests waiting for room in the tenant's
	// limits on its owner (router/queue.go), FbQueue on this node's fallback
	// share while the owner cannot be reached.
	Queue, FbQueue *queue.Queue
	// LostLog bounds the tenant's delta_lost lines (package moves).
	LostLog logmeter.Meter
}

// coreRef holds a tenant's core; one per name, kept across reloads.
type coreRef struct {
	atomic.Pointer[Core]
	// frozenTo, while there is no core, is the node the tenant was handed
	// to, empty, having never been counted here (Freeze): the core, when
	// made, is made frozen for it. A node that owned every tenant for a
	// moment (the first of a cluster) hands tens of thousands over: a
	// word each, not a core.
	frozenTo atomic.Pointer[string]
}

// Core is the tenant's core, made now at its first use.
func (t *Tenant) Core() *Core {
	if c := t.ref.Load(); c != nil {
		return c
	}
	return t.cores.make(t)
}

// Peek is the tenant's core if it was made, else nil: nothing counted,
// no fallback, no spill, no one waiting.
func (t *Tenant) Peek() *Core { return t.ref.Load() }

// Spilled is the tenant's spill on this node, nil if none.
func (t *Tenant) Spilled() *spill.Spill {
	if c := t.Peek(); c != nil {
		return c.Spill.Load()
	}
	return nil
}

// Usage is what t's windows hold at now; nothing, under its limits, for a
// tenant never counted here (an admin view makes no core).
func (t *Tenant) Usage(now int64) limiter.Usage {
	if c := t.Peek(); c != nil {
		return c.Lim.Usage(now)
	}
	return limiter.Usage{Limits: t.Limits}
}

// Falling reports whether a fallback episode of the tenant's is on.
func (t *Tenant) Falling() bool {
	c := t.Peek()
	return c != nil && c.InFallback.Load()
}

// MovedTo is the node the tenant was handed to ("" if none, or unknown),
// without making its core.
func (t *Tenant) MovedTo() string {
	if c := t.Peek(); c != nil {
		return c.Lim.MovedTo()
	}
	if to := t.ref.frozenTo.Load(); to != nil {
		return *to
	}
	return ""
}

// Counters are t's metric series (made at the first call).
func (t *Tenant) Counters() *metrics.Counters {
	if c := t.counts.Load(); c != nil {
		return c
	}
	c := t.metrics.Tenant(t.Name)
	t.counts.Store(c)
	return c
}

// Levels are the entities besides t itself whose limits a request of t
// for model counts on: its limit on that model, then its team. Nil for a
// tenant with neither (the common case: no allocation).
func (t *Tenant) Levels(model string, buf *[2]*Tenant) []*Tenant {
	if t.Team == nil && t.Models == nil {
		return nil
	}
	out := buf[:0]
	if e := t.Models[model]; e != nil {
		out = append(out, e)
	}
	if t.Team != nil {
		out = append(out, t.Team)
	}
	return out
}

// Mode is the tenant's config mode: shadow or enforce.
func (t *Tenant) Mode() string {
	if t.Shadow {
		return config.ModeShadow
	}
	return config.ModeEnforce
}

// OwnLines are the lines on this node where t's requests wait for its own
// limits: its owner's, its fallback share's, its spill's, and its model
// limits' (the router's levelLine).
func (t *Tenant) OwnLines() []*queue.Queue {
	c := t.Peek()
	if c == nil {
		return nil // never served here: no line
	}
	ls := []*queue.Queue{c.Queue, c.FbQueue}
	if sp := c.Spill.Load(); sp != nil {
		ls = append(ls, &sp.Line)
	}
	for _, e := range t.Models {
		if ec := e.Peek(); ec != nil {
			ls = append(ls, ec.Queue, ec.FbQueue)
		}
	}
	return ls
}

// LineFor is the line where a request decided on lim waits for the
// tenant's own limits: its owner's, or an edge's fallback share's (for its
// own clients' requests; a hop decided on a share is not kept waiting);
// nil: none (a spill has its own, admitSpilled).
func (t *Tenant) LineFor(lim *limiter.Tenant, hops int) *queue.Queue {
	switch {
	case lim == t.Core().Lim:
		return t.Core().Queue
	case lim == t.Core().Fb.Made() && hops == 0:
		return t.Core().FbQueue
	}
	return nil
}

// QueueWait is how long a request of class may wait for t (0: it may not).
func (t *Tenant) QueueWait(c queue.Class) time.Duration { return t.waits[c] }

// AnswersMissSpill reports whether the owner's answers seen at (router
// clock) miss admissions on another node's spill that this node took part
// in: it serves one now, or left one after at.
func (t *Tenant) AnswersMissSpill(self string, at int64) bool {
	c := t.Peek()
	return c != nil && c.Spill.Missed(self, at)
}

// Spillable reports whether the tenant may spill: a tenant with a team or
// model limits does not (its spill's budget would not charge them; those
// levels are decided on its owner only).
func (t *Tenant) Spillable() bool {
	return t.Kind == KindTenant && t.Team == nil && t.Models == nil
}

// OwnerSpill is the spill this node, the tenant's owner, serves it on, once
// the budget is ready; nil when there is none (or it failed to start).
func (t *Tenant) OwnerSpill(self string) *spill.Spill {
	return spill.OwnerReady(t.Spilled(), self)
}
