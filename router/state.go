package router

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/ring"
	"github.com/ringgate/ringgate/upstream"
)

// tenant is one configured tenant with its live limiter.
type tenant struct {
	name     string
	priority string
	limits   limiter.Limits
	lim      *limiter.Tenant
	// counts are the tenant's metric series, made at its first count
	// (counters): a node serves few of many configured tenants.
	metrics *metrics
	counts  atomic.Pointer[tenantCounters]

	// The fallback share (fb.share, made at its first use) enforces this
	// node's strict share of the limits while the tenant's owner cannot be
	// reached; inFallback marks the episode so it is logged once.
	inFallback atomic.Bool
	fallbackMu sync.Mutex // serialises the start of an episode
	// fb keeps the fallback share and the admissions of fallback
	// episodes until the owner is told (fallback.go); shared by the
	// tenant's structs across reloads.
	fb *fallbackLedger
	// seen is the owner's usage as its last relayed answer reported it,
	// to seed a fallback share with (fallback.go).
	seen ownerSeen

	// gate holds requests while this node, the new owner, loads the
	// tenant's state; nil when open.
	gate atomic.Pointer[gate]

	// ownedUntil is when this node stopped owning the tenant (Unix ns),
	// ownedNow while it owns it, 0 if it never did.
	ownedUntil atomic.Int64

	// spill is the tenant's spillover as this node serves it (spill.go),
	// shared by the tenant's structs across reloads (a request holding an
	// older one sees the same); arrivals count its requests at its owner,
	// for the rate.
	spill    *spillHolder
	arrivals atomic.Int64
	listed   atomic.Bool // in the router's arrived list

	// queue is the line of requests waiting for room in the tenant's
	// limits on its owner (queue.go), fbQueue on this node's fallback
	// share while the owner cannot be reached; both shared across
	// reloads. waits are the wait budgets by class.
	queue, fbQueue *queue.Queue
	waits          [2]time.Duration

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
	shadowLog shadowMeter
}

// state is everything a reload replaces at once; requests read it through an
// atomic pointer and never see half of a reload.
type state struct {
	cfg       *config.Config
	byKey     map[[32]byte]*tenant
	byName    map[string]*tenant
	byModel   map[string]*upstream.Provider
	providers []*upstream.Provider // the first is the default
	// budgets are the provider limits of the upstreams that have them
	// (budgets.go).
	budgets map[*upstream.Provider]*provBudgets
	// pins place each tenant of a team, and each of a tenant's model
	// limits, on the ring by the top of its hierarchy (ring.Pins).
	pins ring.Pins
	// names are byName's, sorted, made once (the snapshot loop asks for
	// them every interval).
	names []string
}

// buildState makes a state from cfg, keeping the limiter (and so the usage) of
// every tenant that prev already had under the same name. If the window or
// the slot TTL changed, those limiters are rebucketed at now (see
// limiter.Tenant.Rebucket): what they count and the tickets of calls in
// flight carry over to the new bucket widths. The limiters are shared with
// prev, so that is done last: a reload that fails leaves their widths alone.
func buildState(cfg *config.Config, prev *state, m *metrics, hooks stateHooks, now int64) (*state, error) {
	st := &state{
		cfg:     cfg,
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
	b := entityBuilder{st: st, prev: prev, cfg: cfg, m: m, hooks: hooks, pins: ring.Pins{}}
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
	rebucket := b.rebucket
	for _, fb := range b.ledgers {
		if share := fb.setWindow(cfg.Limits.Window, cfg.Limits.SlotTTL); share != nil && share.Window() != cfg.Limits.Window {
			rebucket = append(rebucket, share)
		} else if share != nil && prev != nil && prev.cfg.Limits.SlotTTL != cfg.Limits.SlotTTL {
			rebucket = append(rebucket, share)
		}
	}
	for _, lim := range rebucket {
		lim.Rebucket(now, cfg.Limits.Window, cfg.Limits.SlotTTL)
	}
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

// entityBuilder makes the entities of a new state, keeping the limiter
// (and so the usage) of each one prev had under the same name.
type entityBuilder struct {
	st, prev *state
	cfg      *config.Config
	m        *metrics
	hooks    stateHooks
	pins     ring.Pins
	rebucket []*limiter.Tenant
	ledgers  []*fallbackLedger // every entity's, for their share's window
}

// stateHooks are what a state's tenants tell the router.
type stateHooks struct {
	// spills counts the tenants that have a spill (spillHolder), for the
	// spillover loop.
	spills *atomic.Int64
	// changed hears of each tenant's first change after it was last found
	// empty (limiter.Tenant.OnChange), for the periodic save (Changed).
	changed func(name string)
}

func (b *entityBuilder) entity(name string, limits limiter.Limits, mode string) *tenant {
	cfg := b.cfg
	var lim *limiter.Tenant
	var old *tenant
	if b.prev != nil {
		old = b.prev.byName[name]
	}
	fb := &fallbackLedger{}
	if old != nil {
		lim, fb = old.lim, old.fb
		lim.SetLimits(limits)
		if b.prev.cfg.Limits.Window != cfg.Limits.Window || b.prev.cfg.Limits.SlotTTL != cfg.Limits.SlotTTL {
			b.rebucket = append(b.rebucket, lim)
		}
	} else {
		lim = limiter.NewTenant(limits, cfg.Limits.Window, cfg.Limits.SlotTTL)
		if f := b.hooks.changed; f != nil {
			lim.OnChange(func() { f(name) })
		}
	}
	// The fallback share is made at its first use, with the window in
	// force then (set once the state is built: a reload that fails
	// changes nothing); one made already counts over the new window too.
	b.ledgers = append(b.ledgers, fb)
	t := &tenant{name: name, shadow: mode == config.ModeShadow, limits: limits, lim: lim, metrics: b.m,
		fb: fb, spill: &spillHolder{live: b.hooks.spills}, queue: &queue.Queue{}, fbQueue: &queue.Queue{}}
	if old != nil {
		t.ownedUntil.Store(old.ownedUntil.Load())
		// A fallback episode goes on across a reload, its share kept
		// (old.fallback): not started and seeded again on top of what
		// it admitted.
		t.inFallback.Store(old.inFallback.Load())
		t.seen.at.Store(old.seen.at.Load())
		t.seen.requests.Store(old.seen.requests.Load())
		t.seen.tokens.Store(old.seen.tokens.Load())
		t.spill, t.queue, t.fbQueue = old.spill, old.queue, old.fbQueue
	}
	b.st.byName[name] = t
	return t
}

// counters are t's metric series (made at the first call).
func (t *tenant) counters() *tenantCounters {
	if c := t.counts.Load(); c != nil {
		return c
	}
	c := t.metrics.tenant(t.name)
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
