package router

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/upstream"
)

// tenant is one configured tenant with its live limiter.
type tenant struct {
	name     string
	priority string
	limits   limiter.Limits
	lim      *limiter.Tenant
	counts   *tenantCounters

	// fallback enforces this node's strict share of the limits while the
	// tenant's owner cannot be reached; inFallback marks the episode so it
	// is logged once.
	fallback   *limiter.Tenant
	inFallback atomic.Bool
	fallbackMu sync.Mutex // serialises the start of an episode
	// fb keeps the admissions of fallback episodes until the owner is
	// told (fallback.go).
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

	// queue is the line of requests waiting for room in the tenant's
	// limits on its owner (queue.go), fbQueue on this node's fallback
	// share while the owner cannot be reached; both shared across
	// reloads. waits are the wait budgets by class.
	queue, fbQueue *queue.Queue
	waits          [2]time.Duration

	// shadow: the tenant's limits are in shadow mode (shadow.go).
	shadow     bool
	shadowLog  atomic.Int64 // when the last shadow_refusal line was written (ns)
	shadowMute atomic.Int64 // shadow refusals not logged since
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
}

// buildState makes a state from cfg, keeping the limiter (and so the usage) of
// every tenant that prev already had under the same name. If the window or
// the slot TTL changed, those limiters are rebucketed at now (see
// limiter.Tenant.Rebucket): what they count and the tickets of calls in
// flight carry over to the new bucket widths. The limiters are shared with
// prev, so that is done last: a reload that fails leaves their widths alone.
func buildState(cfg *config.Config, prev *state, m *metrics, now int64) (*state, error) {
	st := &state{
		cfg:     cfg,
		byKey:   make(map[[32]byte]*tenant),
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
	var rebucket []*limiter.Tenant
	for _, tc := range cfg.Tenants {
		limits := limiter.Limits{Requests: int64(tc.RPM), Tokens: int64(tc.TPM), Concurrency: int64(tc.Concurrency)}
		var lim, fallback *limiter.Tenant
		if prev != nil {
			if old := prev.byName[tc.Name]; old != nil {
				lim, fallback = old.lim, old.fallback
				lim.SetLimits(limits)
				if prev.cfg.Limits.Window != cfg.Limits.Window || prev.cfg.Limits.SlotTTL != cfg.Limits.SlotTTL {
					rebucket = append(rebucket, lim, fallback)
				}
			}
		}
		if lim == nil {
			lim = limiter.NewTenant(limits, cfg.Limits.Window, cfg.Limits.SlotTTL)
			fallback = limiter.NewTenant(limits, cfg.Limits.Window, cfg.Limits.SlotTTL)
		}
		t := &tenant{name: tc.Name, priority: tc.Priority, shadow: tc.Mode == config.ModeShadow, limits: limits, lim: lim, fallback: fallback, counts: m.tenant(tc.Name),
			fb: &fallbackLedger{}, spill: &spillHolder{}, queue: &queue.Queue{}, fbQueue: &queue.Queue{}}
		t.waits[queue.Interactive], t.waits[queue.Batch] = tc.Waits(cfg.Queue)
		if prev != nil {
			if old := prev.byName[tc.Name]; old != nil {
				t.ownedUntil.Store(old.ownedUntil.Load())
				// A fallback episode goes on across a reload, its
				// share kept (old.fallback): not started and seeded
				// again on top of what it admitted.
				t.inFallback.Store(old.inFallback.Load())
				t.seen.at.Store(old.seen.at.Load())
				t.seen.requests.Store(old.seen.requests.Load())
				t.seen.tokens.Store(old.seen.tokens.Load())
				t.fb, t.spill, t.queue, t.fbQueue = old.fb, old.spill, old.queue, old.fbQueue
			}
		}
		st.byName[tc.Name] = t
		hashes, err := tc.KeyHashes()
		if err != nil {
			return nil, fmt.Errorf("tenant %s: %w", tc.Name, err)
		}
		for _, h := range hashes {
			st.byKey[h] = t
		}
	}
	for _, lim := range rebucket {
		lim.Rebucket(now, cfg.Limits.Window, cfg.Limits.SlotTTL)
	}
	return st, nil
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
