package tenant

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/router/internal/status"
)

// QueueCollector exports, at scrape time, the depth of every tenant's
// queue on this node that has requests waiting, in the state in force
// (state): a series exists only while its tenant has a line, so idle
// tenants cost no series.
func QueueCollector(state func() *State) prometheus.Collector { return queueCollector{state} }

type queueCollector struct{ state func() *State }

var tenantQueued = prometheus.NewDesc("ringgate_tenant_queued", "Requests waiting on this node in a tenant's queue, by class (only tenants with requests waiting).", []string{"tenant", "class"}, nil)

func (c queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- tenantQueued }

func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	for name, t := range c.state().ByName {
		if t.Kind != KindTenant {
			continue // a level's waiters are its tenants' (OwnLines)
		}
		ls := t.OwnLines()
		if !waiting(ls) {
			continue
		}
		v := status.QueueOf(ls...)
		ch <- prometheus.MustNewConstMetric(tenantQueued, prometheus.GaugeValue, float64(v.Interactive.Waiting), name, queue.Interactive.String())
		ch <- prometheus.MustNewConstMetric(tenantQueued, prometheus.GaugeValue, float64(v.Batch.Waiting), name, queue.Batch.String())
	}
}

// waiting reports whether any of qs has requests waiting.
func waiting(qs []*queue.Queue) bool {
	for _, q := range qs {
		if q.Waiting() > 0 {
			return true
		}
	}
	return false
}
