package router

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/ring"
	"github.com/ringgate/ringgate/router/internal/away"
	"github.com/ringgate/ringgate/router/internal/metrics"
	"github.com/ringgate/ringgate/router/internal/provider"
	"github.com/ringgate/ringgate/router/internal/spill"
	"github.com/ringgate/ringgate/upstream"
)

// tenant is one configured tenant (or level of limits): its config, and
// its core, the part that counts, made at its first use.
type tenant struct {
	name     string
	priority string
	limits   limiter.Limits
	// ref holds the core, nil until the tenant's first use on this node;
	// shared by the tenant's structs across reloads (a request holding an
	// older struct counts on the same core).
	ref   *coreRef
	cores *cores
	// counts are the tenant's metric series, made at its first count
	// (counters): a node serves few of many configured tenants.
	metrics *metrics.Metrics
	counts  atomic.Pointer[metrics.Counters]

	// gate holds requests while this node, the new owner, loads the
	// tenant's state; nil when open.
	gate atomic.Pointer[gate]

	// ownedUntil is when this node stopped owning the tenant (Unix ns),
	// ownedNow while it owns it, 0 if it never did.
	ownedUntil atomic.Int64

	// arrivals count the tenant's requests at its owner, for the
	// spillover rate.
	arrivals atomic.Int64
	listed   atomic.Bool // in the router's arrived list

	// waits are the wait budgets by class in the tenant's lines.
	waits [2]time.Duration

	// kind says what the entity is (kindTenant, kindTeam, kindModel);
	// team and models are a tenant's other levels of limits (levels),
	// members a team's or a model limit's tenants, whose lines wait for
	// its room too.
	kind    uint8
	label   string // "team <name>", "model <model>": a level in messages
	team    *tenant
	models  map[string]*tenant
	members []*tenant

	// shadow: the tenant's limits are in shadow mode (shadow.go).
	shadow    bool
	shadowLog logMeter
}

// core is what a tenant counts on this node. It is made at the tenant's
// first use, not with its config: a node configured with 100 000 tenants
// owns a third of them and serves fewer, and an idle tenant costs its
// config alone. A core is never dropped: a frozen limiter says where the
// tenant went, and must not be forgotten.
type core struct {
	lim *limiter.Tenant
	// The fallback share (fb.Share, made at its first use) enforces this
	// node's strict share of the limits while the tenant's owner cannot be
	// reached; inFallback marks the episode so it is logged once.
	inFallback atomic.Bool
	fallbackMu sync.Mutex // serialises the start of an episode
	// fbStartLog bounds the start lines of episodes that restart for the
	// same owner; fbLogged says whether this episode's start was logged,
	// so that its end is logged with it or not at all. An end may read
	// the next episode's (a start right after the end's swap): a line's
	// pairing, never a count.
	fbStartLog logMeter
	fbLogged   atomic.Bool
	// fb keeps the fallback share and the admissions of fallback
	// episodes until the owner is told (package away).
	fb *away.Ledger
	// seen is the owner's usage as its last relayed answer reported it,
	// to seed a fallback share with (package away).
	seen away.Seen
	// spill is the tenant's spillover as this node serves it (spill.go).
	spill *spill.Holder
	// queue is the line of requests waiting for room in the tenant's
	// limits on its owner (queue.go), fbQueue on this node's fallback
	// share while the owner cannot be reached.
	queue, fbQueue *queue.Queue
	// lostLog bounds the tenant's delta_lost lines (handoff.go).
	lostLog logMeter
}

// coreRef holds a tenant's core; one per name, kept across reloads.
type coreRef struct {
	atomic.Pointer[core]
	// frozenTo, while there is no core, is the node the tenant was handed
	// to, empty, having never been counted here (Freeze): the core, when
	// made, is made frozen for it. A node that owned every tenant for a
	// moment (the first of a cluster) hands tens of thousands over: a
	// word each, not a core.
	frozenTo atomic.Pointer[string]
}

// c is the tenant's core, made now at its first use.
func (t *tenant) c() *core {
	if c := t.ref.Load(); c != nil {
		return c
	}
	return t.cores.make(t)
}

// peek is the tenant's core if it was made, else nil: nothing counted,
// no fallback, no spill, no one waiting.
func (t *tenant) peek() *core { return t.ref.Load() }

// spilled is the tenant's spill on this node, nil if none.
func (t *tenant) spilled() *spill.Spill {
	if c := t.peek(); c != nil {
		return c.spill.Load()
	}
	return nil
}

// usage is what t's windows hold at now; nothing, under its limits, for a
// tenant never counted here (an admin view makes no core).
func (t *tenant) usage(now int64) limiter.Usage {
	if c := t.peek(); c != nil {
		return c.lim.Usage(now)
	}
	return limiter.Usage{Limits: t.limits}
}

// falling reports whether a fallback episode of the tenant's is on.
func (t *tenant) falling() bool {
	c := t.peek()
	return c != nil && c.inFallback.Load()
}

// cores makes tenants' cores on the config in force. A reload installs its
// limits and window under mu (install), and a core is made under mu: one
// made during a reload counts on the reload's config, or is given it.
type cores struct {
	mu              sync.Mutex
	state           *atomic.Pointer[state] // the router's, in force
	window, slotTTL time.Duration
	hooks           stateHooks
	clock           func() int64
	clk             clockwork.Clock // the lines' waits
	// removed keeps, for a window and a slot TTL, the core of an entity a
	// reload removed: put back by a later reload, it goes on with its
	// usage and its running calls' slots, not from nothing (a tenant
	// removed by mistake and restored would have had its limits twice).
	removed map[string]removedRef
}

type removedRef struct {
	ref *coreRef
	at  int64 // when the reload removed it
}

// reclaim is the core of name that a reload removed lately, or nil.
func (cs *cores) reclaim(name string) *coreRef {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if r, ok := cs.removed[name]; ok {
		return r.ref
	}
	return nil
}

// make makes t's core, unless another did first.
func (cs *cores) make(t *tenant) *core {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if c := t.ref.Load(); c != nil {
		return c
	}
	limits := t.limits
	if st := cs.state.Load(); st != nil {
		if ct := st.byName[t.name]; ct != nil && ct.ref == t.ref {
			limits = ct.limits // t is a struct a reload replaced
		}
	}
	c := &core{
		lim:     limiter.NewTenant(limits, cs.window, cs.slotTTL),
		fb:      away.NewLedger(cs.window, cs.slotTTL),
		spill:   spill.NewHolder(cs.hooks.spills),
		queue:   &queue.Queue{Clock: cs.clk},
		fbQueue: &queue.Queue{Clock: cs.clk},
	}
	if to := t.ref.frozenTo.Load(); to != nil {
		c.lim.Freeze(cs.clock(), *to)
	}
	if f, name := cs.hooks.changed, t.name; f != nil {
		c.lim.OnChange(func() { f(name) })
	}
	t.ref.Store(c)
	return c
}

// thaw is limiter.Tenant.Thaw for t, without making its core.
func (cs *cores) thaw(t *tenant) {
	if c := t.peek(); c != nil {
		c.lim.Thaw()
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if c := t.peek(); c != nil {
		c.lim.Thaw()
		return
	}
	t.ref.frozenTo.Store(nil)
}

// freeze is limiter.Tenant.Freeze for t, without making its core if it
// has none: what it hands over is then an empty state, and where it went
// is kept in its coreRef until the core is made.
func (cs *cores) freeze(t *tenant, now int64, to string) limiter.State {
	if c := t.peek(); c != nil {
		return c.lim.Freeze(now, to)
	}
	cs.mu.Lock()
	if c := t.peek(); c != nil {
		cs.mu.Unlock()
		return c.lim.Freeze(now, to)
	}
	t.ref.frozenTo.Store(&to)
	window, slotTTL := cs.window, cs.slotTTL
	cs.mu.Unlock()
	// An empty state as a core's Freeze exports it (bucket widths, head).
	return limiter.NewTenant(t.limits, window, slotTTL).Freeze(now, to)
}

// install puts st in force: the cores made already take its limits (and
// window, rebucketed at now), those made from now on are made on it.
func (cs *cores) install(st *state, now int64) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	lim := st.cfg.Limits
	rewindow := cs.window != lim.Window || cs.slotTTL != lim.SlotTTL
	cs.window, cs.slotTTL = lim.Window, lim.SlotTTL
	cs.keepRemoved(st, now, rewindow)
	for _, t := range st.byName {
		c := t.peek()
		if c == nil {
			continue
		}
		c.lim.SetLimits(t.limits)
		share := c.fb.SetWindow(lim.Window, lim.SlotTTL)
		if rewindow {
			c.lim.Rebucket(now, lim.Window, lim.SlotTTL)
			if share != nil {
				share.Rebucket(now, lim.Window, lim.SlotTTL)
			}
		}
	}
	cs.state.Store(st)
}

// keepRemoved notes the entities the state in force has and st has not,
// forgets those st has again and those removed over a window and a slot
// TTL ago (or all of them when the window changes: their buckets would be
// of the old width); cs.mu is held.
func (cs *cores) keepRemoved(st *state, now int64, rewindow bool) {
	if rewindow {
		cs.removed = nil
	}
	for name, r := range cs.removed {
		if st.byName[name] != nil || now-r.at > int64(cs.window+cs.slotTTL) {
			delete(cs.removed, name)
		}
	}
	prev := cs.state.Load()
	if prev == nil || rewindow {
		return
	}
	for name, t := range prev.byName {
		if st.byName[name] == nil && t.peek() != nil {
			if cs.removed == nil {
				cs.removed = make(map[string]removedRef)
			}
			cs.removed[name] = removedRef{ref: t.ref, at: now}
		}
	}
}

// state is everything a reload replaces at once; requests read it through an
// atomic pointer and never see half of a reload.
type state struct {
	cfg       *config.Config
	version   string // cfg.Fingerprint(), computed once
	byKey     map[[32]byte]*tenant
	byName    map[string]*tenant
	byModel   map[string]*upstream.Provider
	providers []*upstream.Provider // the first is the default
	// budgets are the provider limits of the upstreams that have them
	// (budgets.go).
	budgets map[*upstream.Provider]*provider.Budgets
	// pins place each tenant of a team, and each of a tenant's model
	// limits, on the ring by the top of its hierarchy (ring.Pins).
	pins ring.Pins
	// names are byName's, sorted, made once (the snapshot loop asks for
	// them every interval).
	names []string
}

// buildState makes a state from cfg, keeping the core (and so the usage) of
// every tenant that prev already had under the same name. It changes
// nothing shared with prev: cores.install gives the cores the new limits
// and window once the state is built, so a reload that fails changes
// nothing.
func buildState(cfg *config.Config, prev *state, m *metrics.Metrics, cs *cores) (*state, error) {
	st := &state{
		cfg:     cfg,
		version: cfg.Fingerprint(),
		byKey:   make(map[[32]byte]*tenant, len(cfg.Tenants)),
		byName:  make(map[string]*tenant, len(cfg.Tenants)),
		byModel: make(map[string]*upstream.Provider),
	}
	for _, uc := range cfg.Upstreams {
		kind, err := upstream.ParseKind(uc.Kind)
		if err != nil {
			return nil, fmt.Errorf("upstream %s: %w", uc.Name, err)
		}
		p, err := upstream.NewProvider(upstream.ProviderConfig{
			Name:             uc.Name,
			Kind:             kind,
			BaseURL:          uc.BaseURL,
			APIKey:           uc.APIKey,
			AnthropicVersion: uc.AnthropicVersion,
			ConnectTimeout:   uc.ConnectTimeout,
			Timeout:          uc.Timeout,
			StreamIdle:       uc.StreamIdleTimeout,
		})
		if err != nil {
			return nil, err
		}
		st.providers = append(st.providers, p)
		for _, model := range uc.Models {
			st.byModel[model] = p
		}
	}
	b := entityBuilder{st: st, prev: prev, m: m, cores: cs, pins: ring.Pins{}}
	for _, tc := range cfg.Teams {
		lim := limiter.Limits{Requests: int64(tc.RPM), Tokens: int64(tc.TPM), Concurrency: int64(tc.Concurrency)}
		e := b.entity(teamEntity(tc.Name), lim, tc.Mode)
		e.kind, e.label = kindTeam, "team "+tc.Name
	}
	for _, tc := range cfg.Tenants {
		limits := limiter.Limits{Requests: int64(tc.RPM), Tokens: int64(tc.TPM), Concurrency: int64(tc.Concurrency)}
		t := b.entity(tc.Name, limits, tc.Mode)
		t.priority = tc.Priority
		t.waits[queue.Interactive], t.waits[queue.Batch] = tc.Waits(cfg.Queue)
		key := tc.Name // the ring key of the tenant and all its levels
		if tc.Team != "" {
			if t.team = st.byName[teamEntity(tc.Team)]; t.team == nil {
				return nil, fmt.Errorf("tenant %s: no team %q", tc.Name, tc.Team) // a config that skipped Validate
			}
			t.team.members = append(t.team.members, t)
			key = t.team.name
			b.pins[tc.Name] = key
		}
		for _, ml := range tc.ModelLimits {
			lim := limiter.Limits{Requests: int64(ml.RPM), Tokens: int64(ml.TPM), Concurrency: int64(ml.Concurrency)}
			e := b.entity(modelEntity(tc.Name, ml.Model), lim, tc.Mode)
			e.kind, e.label = kindModel, "model "+ml.Model
			e.members = []*tenant{t}
			b.pins[e.name] = key
			if t.models == nil {
				t.models = make(map[string]*tenant, len(tc.ModelLimits))
			}
			t.models[ml.Model] = e
		}
		hashes, err := tc.KeyHashes()
		if err != nil {
			return nil, fmt.Errorf("tenant %s: %w", tc.Name, err)
		}
		for _, h := range hashes {
			st.byKey[h] = t
		}
	}
	st.pins = b.pins
	st.names = slices.Sorted(maps.Keys(st.byName))
	return st, nil
}

// Entity names: every level of limits is kept in a tenant struct under a
// name of its own, so that handoffs, snapshots, deltas and fallback shares
// move and count it like a tenant. Tenant and team names hold no '/', so
// these never meet a tenant's name or each other.
func teamEntity(team string) string           { return "team/" + team }
func modelEntity(tenant, model string) string { return tenant + "/model/" + model }

// kinds of entity
const (
	kindTenant = iota // a configured tenant: keys, requests
	kindTeam          // a [[teams]] entry's limits
	kindModel         // one of a tenant's [[tenants.model_limits]]
)

// entityBuilder makes the entities of a new state, keeping the core (and
// so the usage) of each one prev had under the same name.
type entityBuilder struct {
	st, prev *state
	m        *metrics.Metrics
	cores    *cores
	pins     ring.Pins
}

// stateHooks are what a state's tenants tell the router.
type stateHooks struct {
	// spills counts the tenants that have a spill (spill.Holder), for the
	// spillover loop.
	spills *atomic.Int64
	// changed hears of each tenant's first change after it was last found
	// empty (limiter.Tenant.OnChange), for the periodic save (Changed).
	changed func(name string)
}

func (b *entityBuilder) entity(name string, limits limiter.Limits, mode string) *tenant {
	var old *tenant
	if b.prev != nil {
		old = b.prev.byName[name]
	}
	t := &tenant{name: name, shadow: mode == config.ModeShadow, limits: limits, metrics: b.m, cores: b.cores}
	switch {
	case old != nil:
		t.ref = old.ref
		t.ownedUntil.Store(old.ownedUntil.Load())
	case b.cores != nil:
		t.ref = b.cores.reclaim(name)
	}
	if t.ref == nil {
		t.ref = &coreRef{}
	}
	b.st.byName[name] = t
	return t
}

// counters are t's metric series (made at the first call).
func (t *tenant) counters() *metrics.Counters {
	if c := t.counts.Load(); c != nil {
		return c
	}
	c := t.metrics.Tenant(t.name)
	t.counts.Store(c)
	return c
}

// levels are the entities besides t itself whose limits a request of t
// for model counts on: its limit on that model, then its team. Nil for a
// tenant with neither (the common case: no allocation).
func (t *tenant) levels(model string, buf *[2]*tenant) []*tenant {
	if t.team == nil && t.models == nil {
		return nil
	}
	out := buf[:0]
	if e := t.models[model]; e != nil {
		out = append(out, e)
	}
	if t.team != nil {
		out = append(out, t.team)
	}
	return out
}

// provider picks the upstream serving model; unknown models go to the first.
func (st *state) provider(model string) *upstream.Provider {
	if p, ok := st.byModel[model]; ok {
		return p
	}
	if len(st.providers) == 0 {
		return nil
	}
	return st.providers[0]
}
