package tenant

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/ring"
	"github.com/ringgate/ringgate/router/internal/metrics"
	"github.com/ringgate/ringgate/router/internal/provider"
	"github.com/ringgate/ringgate/upstream"
)

// State is everything a reload replaces at once; requests read it through an
// atomic pointer and never see half of a reload.
type State struct {
	Cfg       *config.Config
	Version   string // cfg.Fingerprint(), computed once
	ByKey     map[[32]byte]*Tenant
	ByName    map[string]*Tenant
	byModel   map[string]*upstream.Provider
	Providers []*upstream.Provider // the first is the default
	// Budgets are the provider limits of the upstreams that have them
	// (router/budgets.go).
	Budgets map[*upstream.Provider]*provider.Budgets
	// Pins place each tenant of a team, and each of a tenant's model
	// limits, on the ring by the top of its hierarchy (ring.Pins).
	Pins ring.Pins
	// Names are ByName's, sorted, made once (the snapshot loop asks for
	// them every interval).
	Names []string
}

// Build makes a state from cfg, keeping the core (and so the usage) of
// every tenant that prev already had under the same name. It changes
// nothing shared with prev: Cores.Install gives the cores the new limits
// and window once the state is built, so a reload that fails changes
// nothing.
func Build(cfg *config.Config, prev *State, m *metrics.Metrics, cs *Cores) (*State, error) {
	st := &State{
		Cfg:     cfg,
		Version: cfg.Fingerprint(),
		ByKey:   make(map[[32]byte]*Tenant, len(cfg.Tenants)),
		ByName:  make(map[string]*Tenant, len(cfg.Tenants)),
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
		st.Providers = append(st.Providers, p)
		for _, model := range uc.Models {
			st.byModel[model] = p
		}
	}
	b := entityBuilder{st: st, prev: prev, m: m, cores: cs, pins: ring.Pins{}}
	for _, tc := range cfg.Teams {
		lim := limiter.Limits{Requests: int64(tc.RPM), Tokens: int64(tc.TPM), Concurrency: int64(tc.Concurrency)}
		e := b.entity(TeamEntity(tc.Name), lim, tc.Mode)
		e.Kind, e.Label = KindTeam, "team "+tc.Name
	}
	for _, tc := range cfg.Tenants {
		limits := limiter.Limits{Requests: int64(tc.RPM), Tokens: int64(tc.TPM), Concurrency: int64(tc.Concurrency)}
		t := b.entity(tc.Name, limits, tc.Mode)
		t.Priority = tc.Priority
		t.waits[queue.Interactive], t.waits[queue.Batch] = tc.Waits(cfg.Queue)
		key := tc.Name // the ring key of the tenant and all its levels
		if tc.Team != "" {
			if t.Team = st.ByName[TeamEntity(tc.Team)]; t.Team == nil {
				return nil, fmt.Errorf("tenant %s: no team %q", tc.Name, tc.Team) // a config that skipped Validate
			}
			t.Team.Members = append(t.Team.Members, t)
			key = t.Team.Name
			b.pins[tc.Name] = key
		}
		for _, ml := range tc.ModelLimits {
			lim := limiter.Limits{Requests: int64(ml.RPM), Tokens: int64(ml.TPM), Concurrency: int64(ml.Concurrency)}
			e := b.entity(modelEntity(tc.Name, ml.Model), lim, tc.Mode)
			e.Kind, e.Label = KindModel, "model "+ml.Model
			e.Members = []*Tenant{t}
			b.pins[e.Name] = key
			if t.Models == nil {
				t.Models = make(map[string]*Tenant, len(tc.ModelLimits))
			}
			t.Models[ml.Model] = e
		}
		hashes, err := tc.KeyHashes()
		if err != nil {
			return nil, fmt.Errorf("tenant %s: %w", tc.Name, err)
		}
		for _, h := range hashes {
			st.ByKey[h] = t
		}
	}
	st.Pins = b.pins
	st.Names = slices.Sorted(maps.Keys(st.ByName))
	return st, nil
}

// Entity names: every level of limits is kept in a tenant struct under a
// name of its own, so that handoffs, snapshots, deltas and fallback shares
// move and count it like a tenant. Tenant and team names hold no '/', so
// these never meet a tenant's name or each other.
func TeamEntity(team string) string           { return "team/" + team }
func modelEntity(tenant, model string) string { return tenant + "/model/" + model }

// kinds of entity
const (
	KindTenant = iota // a configured tenant: keys, requests
	KindTeam          // a [[teams]] entry's limits
	KindModel         // one of a tenant's [[tenants.model_limits]]
)

// KindName names the entity's kind in log lines: "tenant", "team",
// "model".
func (t *Tenant) KindName() string {
	return [...]string{KindTenant: "tenant", KindTeam: "team", KindModel: "model"}[t.Kind]
}

// entityBuilder makes the entities of a new state, keeping the core (and
// so the usage) of each one prev had under the same name.
type entityBuilder struct {
	st, prev *State
	m        *metrics.Metrics
	cores    *Cores
	pins     ring.Pins
}

// Hooks are what a state's tenants tell the router.
type Hooks struct {
	// Spills counts the tenants that have a spill (spill.Holder), for the
	// spillover loop.
	Spills *atomic.Int64
	// Changed hears of each tenant's first change after it was last found
	// empty (limiter.Tenant.OnChange), for the periodic save (moves.Node.Changed).
	Changed func(name string)
}

func (b *entityBuilder) entity(name string, limits limiter.Limits, mode string) *Tenant {
	var old *Tenant
	if b.prev != nil {
		old = b.prev.ByName[name]
	}
	t := &Tenant{Name: name, Shadow: mode == config.ModeShadow, Limits: limits, metrics: b.m, cores: b.cores}
	switch {
	case old != nil:
		t.ref = old.ref
		t.OwnedUntil.Store(old.OwnedUntil.Load())
	case b.cores != nil:
		t.ref = b.cores.reclaim(name)
	}
	if t.ref == nil {
		t.ref = &coreRef{}
	}
	b.st.ByName[name] = t
	return t
}

// Errors of Provider.
var (
	ErrNoUpstream   = errors.New("no upstream is configured")
	ErrUnknownModel = errors.New("no upstream lists the model")
)

// Provider picks the upstream serving model: the one that lists it, or, for
// a model none lists, the first (limits.unknown_models "default") or none
// (ErrUnknownModel: "refuse"). Every request's upstream is chosen here, so
// a reload's new rule holds for every request decided after it.
func (st *State) Provider(model string) (*upstream.Provider, error) {
	if p, ok := st.byModel[model]; ok {
		return p, nil
	}
	if len(st.Providers) == 0 {
		return nil, ErrNoUpstream
	}
	if st.Cfg.Limits.UnknownModels == config.UnknownModelsRefuse {
		return nil, ErrUnknownModel
	}
	return st.Providers[0], nil
}

// SpillKeys are the budget keys of the spills this node serves (a reload
// keeps them).
func (st *State) SpillKeys(keep map[string]bool) {
	for _, t := range st.ByName {
		if sp := t.Spilled(); sp != nil {
			keep[sp.Key] = true
		}
	}
}

// KickLines has the heads of every line of st's entities, and of those
// gone from it, try again: on a reload, a request that waited is decided
// on the config in force. An entity with no core has no one waiting.
func KickLines(st *State, gone []*Tenant) {
	kick := func(t *Tenant) {
		c := t.Peek()
		if c == nil {
			return
		}
		c.Queue.Kick()
		c.FbQueue.Kick()
		if sp := c.Spill.Load(); sp != nil {
			sp.Line.Kick()
		}
	}
	for _, t := range st.ByName {
		kick(t)
	}
	for _, t := range gone {
		kick(t)
	}
}
