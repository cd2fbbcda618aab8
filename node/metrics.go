package node

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ringgate/ringgate/handoff"
	"github.com/ringgate/ringgate/redisconn"
)

// nodeMetrics are the series of what the node itself runs, beside the
// router's: the handoffs of its ring changes, and its calls to Redis
// (snapshots and leases share the connection). They go in the router's
// registry, on the same /metrics.
type nodeMetrics struct {
	handoffTenants *prometheus.CounterVec
	handoffSeconds prometheus.Histogram
	redisCalls     *prometheus.CounterVec
	redisSeconds   prometheus.Histogram
}

func newNodeMetrics(register func(prometheus.Collector) error) *nodeMetrics {
	m := &nodeMetrics{
		handoffTenants: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringgate_handoff_tenants_total",
			Help: "Tenants this node took over on a ring change, by where their state came from (peer, redis_snapshot, stale_redis_snapshot, conservative, fresh).",
		}, []string{"source"}),
		handoffSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ringgate_handoff_seconds",
			Help:    "Ring changes: time from the new ring to every tenant this node gained decidable here (the rebalance line's handoff_ms).",
			Buckets: []float64{.001, .005, .025, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		redisCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringgate_redis_calls_total",
			Help: "Calls to Redis (snapshots and leases) by result: ok (Redis answered), reply_error (Redis answered with an error: auth, ACL, read-only replica, cluster down), error (failed or timed out), skipped (the breaker was open).",
		}, []string{"result"}),
		redisSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ringgate_redis_call_seconds",
			Help:    "Calls to Redis that were made (ok or error): their time, the redis.timeout budget included.",
			Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .015, .025, .05, .1, .25, 1},
		}),
	}
	for _, src := range []string{"peer", "redis_snapshot", "stale_redis_snapshot", "conservative", "fresh"} {
		m.handoffTenants.WithLabelValues(src) // every source shows, at 0
	}
	for _, r := range []string{"ok", "reply_error", "error", "skipped"} {
		m.redisCalls.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.handoffTenants, m.handoffSeconds, m.redisCalls, m.redisSeconds} {
		_ = register(c) // a fresh registry per router: no collision
	}
	return m
}

// handedOff counts a ring change's arrivals and how long it took.
func (m *nodeMetrics) handedOff(a handoff.Arrival, took time.Duration) {
	for src, n := range a.Counts() {
		m.handoffTenants.WithLabelValues(src).Add(float64(n))
	}
	m.handoffSeconds.Observe(took.Seconds())
}

// redisCall counts a call to Redis (redisconn.Config.OnCall).
func (m *nodeMetrics) redisCall(took time.Duration, err error) {
	var reply redis.Error
	switch {
	case errors.Is(err, redisconn.ErrUnavailable):
		m.redisCalls.WithLabelValues("skipped").Inc()
		return
	case err == nil || errors.Is(err, redis.Nil):
		m.redisCalls.WithLabelValues("ok").Inc()
	case errors.As(err, &reply):
		// Redis answered with an error: WRONGPASS, NOPERM, READONLY
		// after a failover, CLUSTERDOWN...
		m.redisCalls.WithLabelValues("reply_error").Inc()
	default:
		m.redisCalls.WithLabelValues("error").Inc()
	}
	m.redisSeconds.Observe(took.Seconds())
}
