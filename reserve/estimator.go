package reserve

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
)

// Key identifies a completion-length history.
type Key struct{ Tenant, Model string }

// Reservation is what is held against a tenant's limit while a request is
// in flight. Completion is the expected completion reserved and Total is
// Prompt+Completion. Completion > 0 exactly when the request generates
// (see Estimate), which Settle relies on; a Reservation is a plain value and
// may be copied or serialized.
type Reservation struct {
	Key                       Key
	Prompt, Completion, Total int
}

// Usage is the token usage the provider reported for a request.
type Usage struct{ Prompt, Completion int }

// Completion-length averaging.
//
// The history is an exponentially weighted moving average with alpha = 0.2,
// seeded by the first sample. Compared with the mean of the last N samples
// it needs 8 bytes per (tenant, model) instead of an N-slot ring, updates
// lock-free with one CAS, and reads with one atomic load, so Estimate stays
// allocation- and lock-contention-free. It adapts fast enough: after a step
// change in completion lengths the old level's weight is 0.8^n, i.e. 11%
// after 10 requests and 1% after 20. The price is that one outlier moves the
// average by 20% of its distance (a 2000-token answer among ~150-token ones
// lifts the next estimate from ~225 to ~780, decaying back within ~10
// requests); the over-reservation is credited back at settlement, and the
// 1.5x headroom keeps ordinary variation from turning into debits.
const alpha = 0.2

// headroom multiplies the average completion to form the expected
// completion reserved.
const headroom = 1.5

// Memory bounds. Model names are client-controlled, so the number of
// histories is capped:
//
//   - at most DefaultModelsPerTenant models per tenant, and
//   - at most DefaultMaxModels (tenant, model) histories in all, and
//   - at most DefaultMaxTenants tenants, and
//   - model names longer than MaxModelNameLen bytes are never stored.
//
// A model that cannot get its own history (its tenant or the estimator is
// full, or its name is too long) shares the tenant's aggregate history,
// which averages every completion the tenant settles, whatever the model.
// A tenant beyond DefaultMaxTenants has no history at all: its requests are
// estimated with the default completion. Histories are never evicted (a
// fresh Estimator resets them); with the defaults, both caps full of
// maximal names (64-byte tenants, 128-byte models) measured 26 MiB of heap,
// however many names clients send. Tenant names are not length-checked:
// they come from authentication, not from the client.
const (
	DefaultModelsPerTenant = 64
	DefaultMaxModels       = 1 << 16
	DefaultMaxTenants      = 1 << 16
	MaxModelNameLen        = 128
)

// Limits bounds an Estimator's memory; see DefaultModelsPerTenant. Zero
// fields take the defaults.
type Limits struct {
	ModelsPerTenant int // distinct models with their own history per tenant
	MaxModels       int // (tenant, model) histories in all
	MaxTenants      int // tenants with a history
}

// maxCompletion bounds recorded and estimated completions, so that the
// arithmetic never overflows whatever a provider reports.
const maxCompletion = 1 << 30

// Estimator keeps recent completion lengths per (tenant, model) and turns
// them into reservations. It is safe for concurrent use.
//
// Every request reads its histories (Estimate) and writes them (Settle):
// both find them without a lock, so that requests of one tenant on
// several cores write no shared word but the averages themselves (a
// read lock's count was two more, a cache line passed between the cores
// each time).
type Estimator struct {
	defaultCompletion int
	lim               Limits
	models            atomic.Int64 // (tenant, model) histories stored
	tenants           atomic.Int64 // tenants stored
	hists             sync.Map     // tenant name → *tenantHist
}

type tenantHist struct {
	agg ewma // every completion the tenant settled
	// models are its models' histories, at most lim.ModelsPerTenant: a
	// map read without a lock, replaced by a copy with one more under mu.
	models atomic.Pointer[map[string]*ewma]
	mu     sync.Mutex
}

// model is the history of model in th, nil if it has none.
func (th *tenantHist) model(model string) *ewma {
	if m := th.models.Load(); m != nil {
		return (*m)[model]
	}
	return nil
}

// numModels is how many models have a history in th.
func (th *tenantHist) numModels() int {
	if m := th.models.Load(); m != nil {
		return len(*m)
	}
	return 0
}

// ewma is a lock-free exponentially weighted moving average; the zero value
// has no samples.
type ewma struct {
	bits atomic.Uint64 // math.Float64bits(avg) + 1; 0 means no sample yet
}

func (a *ewma) load() (float64, bool) {
	b := a.bits.Load()
	if b == 0 {
		return 0, false
	}
	return math.Float64frombits(b - 1), true
}

func (a *ewma) add(x float64) { a.addWeighted(x, alpha) }

// addWeighted is add with the weight w of the new sample.
func (a *ewma) addWeighted(x, w float64) {
	for {
		old := a.bits.Load()
		v := x
		if old != 0 {
			avg := math.Float64frombits(old - 1)
			v = avg + w*(x-avg)
		}
		// x >= 0, so v is a non-negative finite float whose bits are far
		// below MaxUint64: +1 cannot wrap.
		if a.bits.CompareAndSwap(old, math.Float64bits(v)+1) {
			return
		}
	}
}

// NewEstimator returns an Estimator with the default Limits that expects
// defaultCompletion completion tokens for a (tenant, model) without history.
// A defaultCompletion below 1 is treated as 1.
func NewEstimator(defaultCompletion int) *Estimator {
	return NewEstimatorLimits(defaultCompletion, Limits{})
}

// NewEstimatorLimits is NewEstimator with explicit memory bounds.
func NewEstimatorLimits(defaultCompletion int, lim Limits) *Estimator {
	if lim.ModelsPerTenant <= 0 {
		lim.ModelsPerTenant = DefaultModelsPerTenant
	}
	if lim.MaxModels <= 0 {
		lim.MaxModels = DefaultMaxModels
	}
	if lim.MaxTenants <= 0 {
		lim.MaxTenants = DefaultMaxTenants
	}
	return &Estimator{
		defaultCompletion: clamp(defaultCompletion, 1, maxCompletion),
		lim:               lim,
	}
}

// hist is the tenant's histories, nil if it has none.
func (e *Estimator) hist(tenant string) *tenantHist {
	if th, ok := e.hists.Load(tenant); ok {
		return th.(*tenantHist)
	}
	return nil
}

// Estimate returns the reservation for a request of promptTokens prompt
// tokens.
//
// When the request generates, the expected completion is
// ceil(1.5 x recent average) for k if there is history (Average), else the
// default completion; if maxTokens > 0 it is then capped at maxTokens
// (maxTokens <= 0 means the client gave no limit: the expected value is used
// uncapped). A generating request always reserves at least one completion
// token, so Reservation.Completion > 0 exactly when generates is true.
//
// When it does not generate (embeddings), Completion is 0 and Total is
// Prompt.
//
// Estimate does not allocate and never stores anything: only Settle creates
// histories.
func (e *Estimator) Estimate(k Key, promptTokens, maxTokens int, generates bool) Reservation {
	r := Reservation{Key: k, Prompt: clamp(promptTokens, 0, math.MaxInt/4)}
	if generates {
		c := e.defaultCompletion
		if avg, ok := e.Average(k); ok {
			c = max(1, int(min(math.Ceil(headroom*avg), maxCompletion)))
		}
		if maxTokens > 0 && maxTokens < c {
			c = maxTokens
		}
		r.Completion = c
	}
	r.Total = r.Prompt + r.Completion
	return r
}

// Average returns the recent average completion length Estimate uses for k:
// the history of (k.Tenant, k.Model) if it has one, else, when that model
// cannot get its own history because of the memory bounds, the tenant's
// aggregate. ok is false when there is no such history.
func (e *Estimator) Average(k Key) (avg float64, ok bool) {
	th := e.hist(k.Tenant)
	if th == nil {
		return 0, false
	}
	m := th.model(k.Model)
	if m == nil && e.canAdd(th, k.Model) {
		// A new model that will get its own history at its first
		// settlement: no history yet.
		return 0, false
	}
	if m == nil {
		m = &th.agg // overflow: share the tenant's aggregate
	}
	return m.load()
}

// canAdd reports whether model could get its own history in th now.
func (e *Estimator) canAdd(th *tenantHist, model string) bool {
	return len(model) <= MaxModelNameLen &&
		th.numModels() < e.lim.ModelsPerTenant &&
		e.models.Load() < int64(e.lim.MaxModels)
}

// Settle closes a reservation against the usage the provider reported and
// returns actual total - r.Total: positive, the excess to debit; negative,
// the unused reservation to credit back.
//
// If r generates (r.Completion > 0), actual.Completion is recorded into the
// history of r.Key (and the tenant's aggregate). A zero Usage means nothing
// was consumed (e.g. the upstream call failed before producing anything): it
// credits the whole reservation back and records nothing, so failures do not
// drag the average down. Negative usage counts are treated as 0.
func (e *Estimator) Settle(r Reservation, actual Usage) (delta int) {
	p := clamp(actual.Prompt, 0, math.MaxInt/4)
	c := clamp(actual.Completion, 0, math.MaxInt/4)
	if r.Completion > 0 && (p > 0 || c > 0) {
		e.record(r.Key, float64(min(c, maxCompletion)))
	}
	return p + c - r.Total
}

// record adds a completion sample to k's history and the tenant aggregate,
// creating them within the memory bounds.
func (e *Estimator) record(k Key, x float64) {
	th := e.hist(k.Tenant)
	if th == nil {
		if th = e.addTenant(k.Tenant); th == nil {
			return // no history for tenants past the cap
		}
	}
	m := th.model(k.Model)
	if m == nil && e.canAdd(th, k.Model) {
		m = e.addModel(th, k.Model)
	}
	th.agg.add(x)
	if m != nil {
		m.add(x)
	}
}

// addTenant gives tenant its histories, unless MaxTenants have some; nil
// then.
func (e *Estimator) addTenant(tenant string) *tenantHist {
	if e.tenants.Load() >= int64(e.lim.MaxTenants) {
		// Full: no write to the shared count for every settlement of a
		// tenant past the cap.
		return e.hist(tenant)
	}
	if e.tenants.Add(1) > int64(e.lim.MaxTenants) {
		e.tenants.Add(-1)
		return e.hist(tenant) // added meanwhile, or nil
	}
	// Clone: the key may be a substring of a large request buffer.
	th, loaded := e.hists.LoadOrStore(strings.Clone(tenant), &tenantHist{})
	if loaded {
		e.tenants.Add(-1)
	}
	return th.(*tenantHist)
}

// addModel gives model a history in th, if the bounds allow; nil if not.
func (e *Estimator) addModel(th *tenantHist, model string) *ewma {
	th.mu.Lock()
	defer th.mu.Unlock()
	var old map[string]*ewma
	if p := th.models.Load(); p != nil {
		old = *p
	}
	if m := old[model]; m != nil {
		return m // added meanwhile
	}
	if len(model) > MaxModelNameLen || len(old) >= e.lim.ModelsPerTenant {
		return nil
	}
	if e.models.Add(1) > int64(e.lim.MaxModels) {
		e.models.Add(-1)
		return nil
	}
	m := new(ewma)
	models := make(map[string]*ewma, len(old)+1)
	for name, h := range old {
		models[name] = h
	}
	models[strings.Clone(model)] = m
	th.models.Store(&models)
	return m
}

// Len returns the number of tenants and of (tenant, model) histories
// stored, for metrics.
func (e *Estimator) Len() (tenants, models int) {
	return int(e.tenants.Load()), int(e.models.Load())
}

func clamp(v, lo, hi int) int {
	return max(lo, min(v, hi))
}
