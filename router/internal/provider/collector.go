package provider

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringgate/ringgate/queue"
)

// Collector is the Prometheus collector of the node's budgets.
func (ls *Lines) Collector() prometheus.Collector { return leaseCollector{ls} }

// leaseCollector exports every budget's counters at scrape time; one series
// per budget and counter (budgets are the configured upstreams and models:
// bounded).
type leaseCollector struct{ ls *Lines }

var (
	leaseGrants   = prometheus.NewDesc("ringgate_lease_grants_total", "Blocks of a provider budget asked of Redis (empty ones included).", []string{"budget"}, nil)
	leaseEmpty    = prometheus.NewDesc("ringgate_lease_empty_grants_total", "Grants that found no room in the provider's window.", []string{"budget"}, nil)
	leaseReturns  = prometheus.NewDesc("ringgate_lease_give_backs_total", "Blocks given back to Redis with what was used.", []string{"budget"}, nil)
	leaseErrors   = prometheus.NewDesc("ringgate_lease_store_errors_total", "Lease calls to Redis that failed or timed out.", []string{"budget"}, nil)
	leaseDegraded = prometheus.NewDesc("ringgate_lease_degraded", "1 while Redis is unreachable for this budget (on_redis_down applies); 0 without a store.", []string{"budget"}, nil)
	leaseDegTime  = prometheus.NewDesc("ringgate_lease_degraded_seconds_total", "Time spent with Redis unreachable for this budget.", []string{"budget"}, nil)
	leaseLeft     = prometheus.NewDesc("ringgate_lease_left", "What this node's live blocks have left.", []string{"budget", "dimension"}, nil)
	leaseSlots    = prometheus.NewDesc("ringgate_lease_slots", "Provider slots this node holds, and fills.", []string{"budget", "state"}, nil)
	leaseQueued   = prometheus.NewDesc("ringgate_lease_queued", "Requests waiting on this node for room in a provider budget, by class.", []string{"budget", "class"}, nil)
	leaseShare    = prometheus.NewDesc("ringgate_lease_fair_share", "This node's part of a provider budget, divided among the cluster's tenants by weight (per window; slots).", []string{"budget", "dimension"}, nil)
	leaseWanted   = prometheus.NewDesc("ringgate_lease_wanted", "What this node's tenants want of a provider budget, as it reports it (per window; slots).", []string{"budget", "dimension"}, nil)
)

func (c leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{leaseGrants, leaseEmpty, leaseReturns, leaseErrors, leaseDegraded, leaseDegTime, leaseLeft, leaseSlots, leaseQueued, leaseShare, leaseWanted} {
		ch <- d
	}
}

func (c leaseCollector) Collect(ch chan<- prometheus.Metric) {
	for key, s := range c.ls.cfg.Leaser.Stats() {
		counter := func(d *prometheus.Desc, v float64, l ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, append([]string{key}, l...)...)
		}
		gauge := func(d *prometheus.Desc, v float64, l ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{key}, l...)...)
		}
		counter(leaseGrants, float64(s.Grants))
		counter(leaseEmpty, float64(s.Empty))
		counter(leaseReturns, float64(s.Returns))
		counter(leaseErrors, float64(s.StoreErrors))
		degraded := 0.0
		if s.Degraded {
			degraded = 1
		}
		gauge(leaseDegraded, degraded)
		counter(leaseDegTime, s.DegradedFor.Seconds())
		gauge(leaseLeft, float64(s.Left.Requests), "requests")
		gauge(leaseLeft, float64(s.Left.Tokens), "tokens")
		gauge(leaseSlots, float64(s.SlotsHeld), "held")
		gauge(leaseSlots, float64(s.SlotsUsed), "in_flight")
		if s.Divided {
			gauge(leaseShare, float64(s.Part.Requests), "requests")
			gauge(leaseShare, float64(s.Part.Tokens), "tokens")
			gauge(leaseShare, float64(s.PartSlots), "concurrency")
			gauge(leaseWanted, float64(s.Demand.Requests), "requests")
			gauge(leaseWanted, float64(s.Demand.Tokens), "tokens")
			gauge(leaseWanted, float64(s.DemandSlots), "concurrency")
		}
	}
	c.ls.mu.Lock()
	defer c.ls.mu.Unlock()
	for key, q := range c.ls.byKey {
		for _, class := range []queue.Class{queue.Interactive, queue.Batch} {
			ch <- prometheus.MustNewConstMetric(leaseQueued, prometheus.GaugeValue, float64(q.Depth(class)), key, class.String())
		}
	}
}
