// Package metrics holds a node's Prometheus series: what each counts, and
// the counters resolved once per tenant and upstream so that a request
// does no label lookups. It knows nothing of how requests are decided.
package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ringgate/ringgate/limiter"
)

// Metrics are the node's Prometheus counters. Each router has its own
// registry so several nodes can live in one test process.
type Metrics struct {
	Reg         *prometheus.Registry
	Decisions   *prometheus.CounterVec
	Tokens      *prometheus.CounterVec
	Upstream    *prometheus.CounterVec
	HopsRefused prometheus.Counter
	DeltasSent  prometheus.Counter
	// deltaRetriesDropped: reports not retried, too many being retried.
	DeltaRetriesDropped prometheus.Counter
	DeltasApplied       prometheus.Counter
	// fallbackReported counts admissions made under a fallback share and
	// delivered to the tenant's owner.
	FallbackReported prometheus.Counter
	// clientGone counts calls finished because the client hung up before
	// the upstream answered (the router's hang-up watch).
	ClientGone prometheus.Counter
	// spillover counts tenants switched to and from spillover, by phase.
	Spillover *prometheus.CounterVec
	// shadow counts what shadow limits would have refused.
	Shadow *prometheus.CounterVec
	// queueWaited is how long requests waited in a tenant's line.
	QueueWaited *prometheus.HistogramVec
	// The cluster as this node sees it (SetView): its ring's version,
	// the members by state, whether their config versions differ.
	RingVersion   prometheus.Gauge
	Members       *prometheus.GaugeVec
	ConfigsDiffer prometheus.Gauge
	// hops are this node's requests handed to a tenant's owner, by
	// outcome; hopSeconds how long the owner took to answer (its
	// headers: the upstream's time included).
	Hops       [hopOutcomes]prometheus.Counter
	HopSeconds prometheus.Histogram
	// fallbackEpisodes counts the episodes a tenant's owner could not be
	// reached and this node enforced its share.
	FallbackEpisodes prometheus.Counter

	mu      sync.Mutex
	tenants map[string]*Counters
	// answers holds each upstream's answer counters (by name), resolved
	// once: a label lookup costs more than the decision.
	answers sync.Map // string → *answerCounters
}

// answerCounters are one upstream's ringgate_upstream_responses_total series.
type answerCounters struct {
	class   [4]prometheus.Counter // 2xx, 3xx, 4xx, 5xx
	timeout prometheus.Counter
	err     prometheus.Counter
}

// answersOf is the upstream name's answer counters.
func (m *Metrics) answersOf(name string) *answerCounters {
	if a, ok := m.answers.Load(name); ok {
		return a.(*answerCounters)
	}
	a := &answerCounters{
		timeout: m.Upstream.WithLabelValues(name, "timeout"),
		err:     m.Upstream.WithLabelValues(name, "error"),
	}
	for i, class := range []string{"2xx", "3xx", "4xx", "5xx"} {
		a.class[i] = m.Upstream.WithLabelValues(name, class)
	}
	got, _ := m.answers.LoadOrStore(name, a)
	return got.(*answerCounters)
}

// TimedOut counts an upstream call that got no answer in time.
func (m *Metrics) TimedOut(name string) { m.answersOf(name).timeout.Inc() }

// Failed counts an upstream call that failed without an answer.
func (m *Metrics) Failed(name string) { m.answersOf(name).err.Inc() }

// Answered counts an upstream's answer by its status class.
func (m *Metrics) Answered(name string, status int) {
	a := m.answersOf(name)
	switch {
	case status < 300:
		a.class[0].Inc()
	case status < 400:
		a.class[1].Inc()
	case status < 500:
		a.class[2].Inc()
	default:
		a.class[3].Inc()
	}
}

// Counters are a tenant's, resolved once so the hot path does no label
// lookups.
type Counters struct {
	Allowed, Requests, Tokens, Concurrency prometheus.Counter
	Upstream                               prometheus.Counter // refused for the provider's limit
	Queue                                  prometheus.Counter // refused after waiting (full line, wait budget spent)
	Reserved, Settled                      prometheus.Counter
}

// New makes a node's counters on a registry of its own.
func New() *Metrics {
	m := &Metrics{
		Reg: prometheus.NewRegistry(),
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringgate_decisions_total",
			Help: "Admission decisions by tenant and result (allowed, or the dimension that refused).",
		}, []string{"tenant", "result"}),
		Tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringgate_tokens_total",
			Help: "Tokens reserved before calls and settled after them, by tenant.",
		}, []string{"tenant", "phase"}),
		Upstream: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringgate_upstream_responses_total",
			Help: "Upstream answers by provider and status class (or transport error).",
		}, []string{"upstream", "class"}),
		HopsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringgate_hops_refused_total",
			Help: "Peer requests refused for a bad signature, stale time, replay or wrong target.",
		}),
		DeltasSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringgate_handoff_deltas_sent_total",
			Help: "Changes to a moved tenant's windows (calls admitted here ending after the move) sent to its new owner.",
		}),
		DeltaRetriesDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringgate_handoff_delta_retries_dropped_total",
			Help: "Reports to a tenant's owner that failed and were not retried: too many were being retried already (an owner out of reach under load).",
		}),
		DeltasApplied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringgate_handoff_deltas_applied_total",
			Help: "Changes reported by a tenant's previous owner and applied here.",
		}),
		FallbackReported: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringgate_fallback_reported_total",
			Help: "Admissions made under a fallback share (owner unreachable) and delivered to the tenant's owner.",
		}),
		ClientGone: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringgate_client_gone_total",
			Help: "Calls finished because the client hung up before the upstream answered.",
		}),
		Spillover: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringgate_spillover_total",
			Help: "Hot tenants switched to spillover (on) and back (off) by their owner, refused a switch (refused), or left by this node as an edge (left).",
		}, []string{"phase"}),
		Shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringgate_shadow_refusals_total",
			Help: "Requests a limit in shadow mode would have refused and let through, by tenant and dimension.",
		}, []string{"tenant", "dimension"}),
		QueueWaited: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ringgate_queue_wait_seconds",
			Help:    "How long requests refused by their tenant's limits waited in its line, by class (admitted or not).",
			Buckets: []float64{.001, .005, .025, .1, .25, .5, 1, 2, 5, 15, 60},
		}, []string{"class"}),
		RingVersion: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ringgate_ring_version",
			Help: "This node's ring counter (as /cluster): one more on each ring it builds.",
		}),
		Members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ringgate_members",
			Help: "Live members this node's gossip knows, by state (active, draining), itself included.",
		}, []string{"state"}),
		ConfigsDiffer: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ringgate_configs_differ",
			Help: "1 while a member gossips another config version than this node's (as /cluster).",
		}),
		HopSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ringgate_hop_seconds",
			Help:    "Requests handed to a tenant's owner: time until the owner's answer headers (the upstream's time included).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10, 60},
		}),
		FallbackEpisodes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringgate_fallback_episodes_total",
			Help: "Episodes in which a tenant's owner could not be reached and this node enforced its strict share.",
		}),
		tenants: make(map[string]*Counters),
	}
	hops := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringgate_hops_total",
		Help: "Requests this node handed to a tenant's owner, by outcome: answered, unreachable (not sent; the fallback share decided), refused (by the owner: stale, catching up), failed (the owner failed mid-request: 502 owner_failed).",
	}, []string{"result"})
	for o := range hopOutcomes {
		m.Hops[o] = hops.WithLabelValues(HopOutcome(o).String())
	}
	m.Reg.MustRegister(m.Decisions, m.Tokens, m.Upstream, m.HopsRefused, m.DeltasSent, m.DeltaRetriesDropped, m.DeltasApplied, m.FallbackReported, m.ClientGone, m.Spillover, m.QueueWaited, m.Shadow,
		m.RingVersion, m.Members, m.ConfigsDiffer, hops, m.HopSeconds, m.FallbackEpisodes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// HopOutcome is how a hop to a tenant's owner ended.
type HopOutcome int

const (
	HopAnswered HopOutcome = iota
	HopUnreachable
	HopRefused
	HopFailed
	hopOutcomes
)

func (o HopOutcome) String() string {
	return [...]string{"answered", "unreachable", "refused", "failed"}[o]
}

// HopEnded counts a hop by outcome, and the owner's time when it answered.
func (m *Metrics) HopEnded(o HopOutcome, took time.Duration) {
	m.Hops[o].Inc()
	if o == HopAnswered {
		m.HopSeconds.Observe(took.Seconds())
	}
}

// ViewChanged sets the ring and membership gauges: the ring's version,
// the members by state, whether their config versions differ.
func (m *Metrics) ViewChanged(ringVersion uint64, active, draining int, configsDiffer bool) {
	m.RingVersion.Set(float64(ringVersion))
	m.Members.WithLabelValues("active").Set(float64(active))
	m.Members.WithLabelValues("draining").Set(float64(draining))
	differ := 0.0
	if configsDiffer {
		differ = 1
	}
	m.ConfigsDiffer.Set(differ)
}

// Refused counts a refusal by the dimension that refused.
func (c *Counters) Refused(d limiter.Dimension) {
	switch d {
	case limiter.Requests:
		c.Requests.Inc()
	case limiter.Tokens:
		c.Tokens.Inc()
	case limiter.Concurrency:
		c.Concurrency.Inc()
	}
}

// MaxTenantSeries bounds the tenants with metric series of their own on a
// node: the first to be decided here get them (8 series each, ~4 KB), the
// others count together as tenant="_other". A node configured with 100 000
// tenants keeps its /metrics, and its memory, bounded.
const MaxTenantSeries = 1000

// OtherTenants is the tenant label of those past MaxTenantSeries.
const OtherTenants = "_other"

// Tenant is the counters of the tenant name.
func (m *Metrics) Tenant(name string) *Counters {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.tenants[name]; ok {
		return c
	}
	if len(m.tenants) >= MaxTenantSeries {
		name = OtherTenants
		if c, ok := m.tenants[name]; ok {
			return c
		}
	}
	c := &Counters{
		Allowed:     m.Decisions.WithLabelValues(name, "allowed"),
		Requests:    m.Decisions.WithLabelValues(name, "requests"),
		Tokens:      m.Decisions.WithLabelValues(name, "tokens"),
		Concurrency: m.Decisions.WithLabelValues(name, "concurrency"),
		Upstream:    m.Decisions.WithLabelValues(name, "upstream"),
		Queue:       m.Decisions.WithLabelValues(name, "queue"),
		Reserved:    m.Tokens.WithLabelValues(name, "reserved"),
		Settled:     m.Tokens.WithLabelValues(name, "settled"),
	}
	m.tenants[name] = c
	return c
}
