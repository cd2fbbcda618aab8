package router

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ringgate/ringgate/limiter"
)

// metrics are the node's Prometheus counters. Each router has its own
// registry so several nodes can live in one test process.
type metrics struct {
	reg         *prometheus.Registry
	decisions   *prometheus.CounterVec
	tokens      *prometheus.CounterVec
	upstream    *prometheus.CounterVec
	hopsRefused prometheus.Counter
	deltasSent  prometheus.Counter
	// deltaRetriesDropped: reports not retried, too many being retried.
	deltaRetriesDropped prometheus.Counter
	deltasApplied       prometheus.Counter
	// fallbackReported counts admissions made under a fallback share and
	// delivered to the tenant's owner.
	fallbackReported prometheus.Counter
	// clientGone counts calls finished because the client hung up before
	// the upstream answered (hangup.go).
	clientGone prometheus.Counter
	// spillover counts tenants switched to and from spillover, by phase.
	spillover *prometheus.CounterVec
	// shadow counts what shadow limits would have refused.
	shadow *prometheus.CounterVec
	// queueWaited is how long requests waited in a tenant's line.
	queueWaited *prometheus.HistogramVec
	// The cluster as this node sees it (SetView): its ring's version,
	// the members by state, whether their config versions differ.
	ringVersion   prometheus.Gauge
	members       *prometheus.GaugeVec
	configsDiffer prometheus.Gauge
	// hops are this node's requests handed to a tenant's owner, by
	// outcome; hopSeconds how long the owner took to answer (its
	// headers: the upstream's time included).
	hops       [hopOutcomes]prometheus.Counter
	hopSeconds prometheus.Histogram
	// fallbackEpisodes counts the episodes a tenant's owner could not be
	// reached and this node enforced its share.
	fallbackEpisodes prometheus.Counter

	mu      sync.Mutex
	tenants map[string]*tenantCounters
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
func (m *metrics) answersOf(name string) *answerCounters {
	if a, ok := m.answers.Load(name); ok {
		return a.(*answerCounters)
	}
	a := &answerCounters{
		timeout: m.upstream.WithLabelValues(name, "timeout"),
		err:     m.upstream.WithLabelValues(name, "error"),
	}
	for i, class := range []string{"2xx", "3xx", "4xx", "5xx"} {
		a.class[i] = m.upstream.WithLabelValues(name, class)
	}
	got, _ := m.answers.LoadOrStore(name, a)
	return got.(*answerCounters)
}

// answered counts an upstream's answer by its status class.
func (m *metrics) answered(name string, status int) {
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

// tenantCounters are resolved once per tenant so the hot path does no label
// lookups.
type tenantCounters struct {
	allowed, requests, tokens, concurrency prometheus.Counter
	upstream                               prometheus.Counter // refused for the provider's limit
	queue                                  prometheus.Counter // refused after waiting (full line, wait budget spent)
	reserved, settled                      prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringgate_decisions_total",
			Help: "Admission decisions by tenant and result (allowed, or the dimension that refused).",
		}, []string{"tenant", "result"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringgate_tokens_total",
			Help: "Tokens reserved before calls and settled after them, by tenant.",
		}, []string{"tenant", "phase"}),
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringgate_upstream_responses_total",
			Help: "Upstream answers by provider and status class (or transport error).",
		}, []string{"upstream", "class"}),
		hopsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringgate_hops_refused_total",
			Help: "Peer requests refused for a bad signature, stale time, replay or wrong target.",
		}),
		deltasSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringgate_handoff_deltas_sent_total",
			Help: "Changes to a moved tenant's windows (calls admitted here ending after the move) sent to its new owner.",
		}),
		deltaRetriesDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringgate_handoff_delta_retries_dropped_total",
			Help: "Reports to a tenant's owner that failed and were not retried: too many were being retried already (an owner out of reach under load).",
		}),
		deltasApplied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringgate_handoff_deltas_applied_total",
			Help: "Changes reported by a tenant's previous owner and applied here.",
		}),
		fallbackReported: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringgate_fallback_reported_total",
			Help: "Admissions made under a fallback share (owner unreachable) and delivered to the tenant's owner.",
		}),
		clientGone: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringgate_client_gone_total",
			Help: "Calls finished because the client hung up before the upstream answered.",
		}),
		spillover: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringgate_spillover_total",
			Help: "Hot tenants switched to spillover (on) and back (off) by their owner, refused a switch (refused), or left by this node as an edge (left).",
		}, []string{"phase"}),
		shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringgate_shadow_refusals_total",
			Help: "Requests a limit in shadow mode would have refused and let through, by tenant and dimension.",
		}, []string{"tenant", "dimension"}),
		queueWaited: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ringgate_queue_wait_seconds",
			Help:    "How long requests refused by their tenant's limits waited in its line, by class (admitted or not).",
			Buckets: []float64{.001, .005, .025, .1, .25, .5, 1, 2, 5, 15, 60},
		}, []string{"class"}),
		ringVersion: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ringgate_ring_version",
			Help: "This node's ring counter (as /cluster): one more on each ring it builds.",
		}),
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ringgate_members",
			Help: "Live members this node's gossip knows, by state (active, draining), itself included.",
		}, []string{"state"}),
		configsDiffer: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ringgate_configs_differ",
			Help: "1 while a member gossips another config version than this node's (as /cluster).",
		}),
		hopSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ringgate_hop_seconds",
			Help:    "Requests handed to a tenant's owner: time until the owner's answer headers (the upstream's time included).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10, 60},
		}),
		fallbackEpisodes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringgate_fallback_episodes_total",
			Help: "Episodes in which a tenant's owner could not be reached and this node enforced its strict share.",
		}),
		tenants: make(map[string]*tenantCounters),
	}
	hops := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringgate_hops_total",
		Help: "Requests this node handed to a tenant's owner, by outcome: answered, unreachable (not sent; the fallback share decided), refused (by the owner: stale, catching up), failed (the owner failed mid-request: 502 owner_failed).",
	}, []string{"result"})
	for o := range hopOutcomes {
		m.hops[o] = hops.WithLabelValues(hopOutcome(o).String())
	}
	m.reg.MustRegister(m.decisions, m.tokens, m.upstream, m.hopsRefused, m.deltasSent, m.deltaRetriesDropped, m.deltasApplied, m.fallbackReported, m.clientGone, m.spillover, m.queueWaited, m.shadow,
		m.ringVersion, m.members, m.configsDiffer, hops, m.hopSeconds, m.fallbackEpisodes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// hopOutcome is how a hop to a tenant's owner ended.
type hopOutcome int

const (
	hopAnswered hopOutcome = iota
	hopUnreachable
	hopRefused
	hopFailed
	hopOutcomes
)

func (o hopOutcome) String() string {
	return [...]string{"answered", "unreachable", "refused", "failed"}[o]
}

// hopEnded counts a hop by outcome, and the owner's time when it answered.
func (m *metrics) hopEnded(o hopOutcome, took time.Duration) {
	m.hops[o].Inc()
	if o == hopAnswered {
		m.hopSeconds.Observe(took.Seconds())
	}
}

// viewChanged sets the ring and membership gauges.
func (m *metrics) viewChanged(cv clusterView) {
	m.ringVersion.Set(float64(cv.RingVersion))
	var active, draining float64
	for _, mb := range cv.Members {
		if mb.State == "draining" {
			draining++
		} else {
			active++
		}
	}
	m.members.WithLabelValues("active").Set(active)
	m.members.WithLabelValues("draining").Set(draining)
	differ := 0.0
	if cv.ConfigsDiffer {
		differ = 1
	}
	m.configsDiffer.Set(differ)
}

// refused counts a refusal by the dimension that refused.
func (c *tenantCounters) refused(d limiter.Dimension) {
	switch d {
	case limiter.Requests:
		c.requests.Inc()
	case limiter.Tokens:
		c.tokens.Inc()
	case limiter.Concurrency:
		c.concurrency.Inc()
	}
}

// maxTenantSeries bounds the tenants with metric series of their own on a
// node: the first to be decided here get them (8 series each, ~4 KB), the
// others count together as tenant="_other". A node configured with 100 000
// tenants keeps its /metrics, and its memory, bounded.
const maxTenantSeries = 1000

// otherTenants is the tenant label of those past maxTenantSeries.
const otherTenants = "_other"

func (m *metrics) tenant(name string) *tenantCounters {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.tenants[name]; ok {
		return c
	}
	if len(m.tenants) >= maxTenantSeries {
		name = otherTenants
		if c, ok := m.tenants[name]; ok {
			return c
		}
	}
	c := &tenantCounters{
		allowed:     m.decisions.WithLabelValues(name, "allowed"),
		requests:    m.decisions.WithLabelValues(name, "requests"),
		tokens:      m.decisions.WithLabelValues(name, "tokens"),
		concurrency: m.decisions.WithLabelValues(name, "concurrency"),
		upstream:    m.decisions.WithLabelValues(name, "upstream"),
		queue:       m.decisions.WithLabelValues(name, "queue"),
		reserved:    m.tokens.WithLabelValues(name, "reserved"),
		settled:     m.tokens.WithLabelValues(name, "settled"),
	}
	m.tenants[name] = c
	return c
}

// Register adds a collector (the node's snapshot store counters, say) to
// the node's /metrics.
func (r *Router) Register(c prometheus.Collector) error { return r.metrics.reg.Register(c) }
