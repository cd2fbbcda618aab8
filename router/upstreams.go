package router

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/queue"
)

// budgetView is one budget (an upstream's or a model's) as /upstreams
// shows it: the provider's limits, what this node holds of them and what
// the cluster's window held at this node's last grant.
type budgetView struct {
	Limits struct {
		Requests    int64 `json:"requests"`
		Tokens      int64 `json:"tokens"`
		Concurrency int64 `json:"concurrency"`
	} `json:"limits"`
	// InForce is the limits applied: the configured ones, or lower where
	// the provider's answers said it allows less.
	InForce struct {
		Requests int64 `json:"requests"`
		Tokens   int64 `json:"tokens"`
	} `json:"in_force"`
	Corrections uint64 `json:"corrections"` // times the provider said less was left than the window did
	// Lease is this node's part.
	Lease struct {
		Blocks        int   `json:"blocks"`
		LeftRequests  int64 `json:"left_requests"`
		LeftTokens    int64 `json:"left_tokens"`
		SlotsHeld     int64 `json:"slots_held"`
		SlotsInFlight int64 `json:"slots_in_flight"`
	} `json:"lease"`
	// Window is the cluster's window at the last grant (blocks
	// outstanding included).
	Window struct {
		Requests int64 `json:"requests"`
		Tokens   int64 `json:"tokens"`
	} `json:"cluster_window"`
	// Learned: the budget was made from what the provider's answers
	// stated of the model's limit (learned.go), not from the config.
	Learned *learnedView `json:"learned,omitempty"`
	// Share is this node's part of the budget in the cluster-wide
	// division among the tenants that want it, and what its tenants
	// want; absent before the first division, or with no demand here.
	Share       *shareView `json:"fair_share,omitempty"`
	Grants      uint64     `json:"grants"`
	EmptyGrants uint64     `json:"empty_grants"`
	GiveBacks   uint64     `json:"give_backs"`
	StoreErrors uint64     `json:"store_errors"`
	Degraded    bool       `json:"degraded"`
	DegradedMs  int64      `json:"degraded_ms"`
	OnRedisDown string     `json:"on_redis_down"`
	Queue       queueView  `json:"queue"` // requests waiting on this node for the budget
}

// learnedView is a learned model limit: what the provider stated, in
// which header, since when.
type learnedView struct {
	Requests int64  `json:"requests,omitempty"`
	Tokens   int64  `json:"tokens,omitempty"`
	From     string `json:"from"`
	Since    string `json:"since"`
}

// shareView is a node's part of a budget divided among the cluster's
// tenants by weight: per window, and slots.
type shareView struct {
	Requests    int64 `json:"requests"`
	Tokens      int64 `json:"tokens"`
	Concurrency int64 `json:"concurrency"`
	Wanted      struct {
		Requests    int64 `json:"requests"`
		Tokens      int64 `json:"tokens"`
		Concurrency int64 `json:"concurrency"`
	} `json:"wanted"`
	Nodes     int    `json:"nodes"` // nodes whose tenants want it
	PartSpent uint64 `json:"part_spent"`
}

type upstreamView struct {
	Name   string                 `json:"name"`
	Kind   string                 `json:"kind"`
	Limits *budgetView            `json:"budget,omitempty"` // nil: no upstream-wide limit
	Models map[string]*budgetView `json:"models,omitempty"`
}

type upstreamsView struct {
	Node      string         `json:"node"`
	Window    string         `json:"window"`
	Upstreams []upstreamView `json:"upstreams"`
	// Peers is every other member's own view, asked of it: its leases,
	// queues and counters. Absent with ?local=1 (how a member is asked)
	// and on a node alone.
	Peers []peerUpstreams `json:"peers,omitempty"`
}

// peerUpstreams is a member's own /upstreams, or why it is missing.
type peerUpstreams struct {
	Node      string         `json:"node"`
	Error     string         `json:"error,omitempty"`
	Upstreams []upstreamView `json:"upstreams,omitempty"`
}

func viewOf(b *budgetLine, now int64, down string) *budgetView {
	s := b.Stats(now)
	v := &budgetView{}
	v.Queue = viewQueue(b.line)
	v.Limits.Requests, v.Limits.Tokens, v.Limits.Concurrency = s.Limits.Requests, s.Limits.Tokens, s.Limits.Concurrency
	v.InForce.Requests, v.InForce.Tokens, v.Corrections = s.Learned.Requests, s.Learned.Tokens, s.Corrections
	v.Lease.Blocks, v.Lease.LeftRequests, v.Lease.LeftTokens = s.Blocks, s.Left.Requests, s.Left.Tokens
	v.Lease.SlotsHeld, v.Lease.SlotsInFlight = s.SlotsHeld, s.SlotsUsed
	v.Window.Requests, v.Window.Tokens = s.Used.Requests, s.Used.Tokens
	v.Grants, v.EmptyGrants, v.GiveBacks, v.StoreErrors = s.Grants, s.Empty, s.Returns, s.StoreErrors
	v.Degraded, v.DegradedMs = s.Degraded, s.DegradedFor.Milliseconds()
	v.OnRedisDown = down
	if s.Divided {
		sv := &shareView{Requests: s.Part.Requests, Tokens: s.Part.Tokens, Concurrency: s.PartSlots, Nodes: s.Nodes, PartSpent: s.PartSpent}
		sv.Wanted.Requests, sv.Wanted.Tokens, sv.Wanted.Concurrency = s.Demand.Requests, s.Demand.Tokens, s.DemandSlots
		v.Share = sv
	}
	return v
}

func (r *Router) upstreamsView() upstreamsView {
	st := r.state.Load()
	now := r.clock()
	out := upstreamsView{Node: r.node, Window: st.cfg.Limits.Window.String()}
	for i, uc := range st.cfg.Upstreams {
		uv := upstreamView{Name: uc.Name, Kind: uc.Kind}
		down := uc.OnRedisDown
		if down == "" {
			down = "share"
		}
		if pb := st.budgets[st.providers[i]]; pb != nil {
			if pb.up != nil {
				uv.Limits = viewOf(pb.up, now, down)
			}
			for m, b := range pb.models {
				if uv.Models == nil {
					uv.Models = make(map[string]*budgetView)
				}
				uv.Models[m] = viewOf(b, now, down)
			}
			for m, lb := range pb.learned.all() {
				if uv.Models == nil {
					uv.Models = make(map[string]*budgetView)
				}
				v := viewOf(lb.budgetLine, now, down)
				v.Learned = &learnedView{Requests: lb.limits.Requests, Tokens: lb.limits.Tokens, From: lb.from, Since: lb.since.UTC().Format(time.RFC3339)}
				uv.Models[m] = v
			}
		}
		out.Upstreams = append(out.Upstreams, uv)
	}
	return out
}

// serveUpstreams answers GET /upstreams: this node's view, and unless
// local (an admin's ?local=1, or a member asking) every other member's.
func (r *Router) serveUpstreams(ctx *fasthttp.RequestCtx, local bool) {
	out := r.upstreamsView()
	if !local {
		out.Peers = r.peerUpstreams()
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
}

// peerUpstreams asks every other member of the view for its own
// /upstreams, all at once, each within ownerViewTimeout: a member that
// does not answer in time is listed with the error.
func (r *Router) peerUpstreams() []peerUpstreams {
	v := r.view.Load()
	if v == nil {
		return nil
	}
	var out []peerUpstreams
	for _, m := range v.members { // sorted by name
		if m.Name != r.node {
			out = append(out, peerUpstreams{Node: m.Name})
		}
	}
	var wg sync.WaitGroup
	for i := range out {
		p := &out[i]
		if !r.hops.Enabled() {
			p.Error = "no cluster secret to ask it with"
			continue
		}
		wg.Go(func() {
			status, body, err := r.peerDo(v, v.addrs[p.Node], p.Node, fasthttp.MethodGet, "/upstreams?local=1", nil, 1, ownerViewTimeout)
			var pv upstreamsView
			switch {
			case err != nil:
				p.Error = err.Error()
			case status != fasthttp.StatusOK:
				p.Error = fmt.Sprintf("%s answered %d: %.200s", p.Node, status, body)
			case json.Unmarshal(body, &pv) != nil:
				p.Error = fmt.Sprintf("%s answered what is not its view: %.200s", p.Node, body)
			default:
				p.Upstreams = pv.Upstreams
			}
		})
	}
	wg.Wait()
	return out
}

// leaseCollector exports every budget's counters at scrape time; one series
// per budget and counter (budgets are the configured upstreams and models:
// bounded).
type leaseCollector struct{ r *Router }

var (
	leaseGrants   = prometheus.NewDesc("ringgate_lease_grants_total", "Blocks of a provider budget asked of Redis (empty ones included).", []string{"budget"}, nil)
	leaseEmpty    = prometheus.NewDesc("ringgate_lease_empty_grants_total", "Grants that found no room in the provider's window.", []string{"budget"}, nil)
	leaseReturns  = prometheus.NewDesc("ringgate_lease_give_backs_total", "Blocks given back to Redis with what was used.", []string{"budget"}, nil)
	leaseErrors   = prometheus.NewDesc("ringgate_lease_store_errors_total", "Lease calls to Redis that failed or timed out.", []string{"budget"}, nil)
	leaseDegraded = prometheus.NewDesc("ringgate_lease_degraded", "1 while Redis is unreachable for this budget (on_redis_down applies).", []string{"budget"}, nil)
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
	for key, s := range c.r.leaser.Stats() {
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
	c.r.lines.mu.Lock()
	defer c.r.lines.mu.Unlock()
	for key, q := range c.r.lines.byKey {
		for _, class := range []queue.Class{queue.Interactive, queue.Batch} {
			ch <- prometheus.MustNewConstMetric(leaseQueued, prometheus.GaugeValue, float64(q.Depth(class)), key, class.String())
		}
	}
}
