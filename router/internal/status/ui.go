package status

import (
	"cmp"
	"time"
)

// UI is /ui/state: what the status page shows of the cluster, as the node
// that serves it assembles it from its members' own parts.
type UI struct {
	Cluster Cluster `json:"cluster"`
	// Tenants are the busiest tenants the members own, busiest first
	// (Busier), at most the limit asked for.
	Tenants []Tenant `json:"tenants"`
	// TenantsMatched counts the tenants the members that answered own and
	// the filter matched; TenantsLeftOut those of them not in Tenants.
	TenantsMatched int    `json:"tenants_matched"`
	TenantsLeftOut int    `json:"tenants_left_out"`
	Totals         Totals `json:"totals"`
	// Nodes are the members' own parts, sorted by name: their leases and
	// queues, their last rebalances, or why a member did not answer.
	Nodes []UINode `json:"nodes"`
}

// UINode is one member's own part of /ui/state.
type UINode struct {
	Node  string `json:"node"`
	Error string `json:"error,omitempty"`
	// Window is the length of the limits' windows.
	Window     string      `json:"window,omitempty"`
	Upstreams  []Upstream  `json:"upstreams,omitempty"`
	Rebalances []Rebalance `json:"rebalances,omitempty"`
	// Tenants, Matched and Totals are the tenants this member owns by
	// its ring; the serving node merges them into UI's and leaves them
	// out of Nodes.
	Tenants []Tenant `json:"tenants,omitempty"`
	Matched int      `json:"matched,omitempty"`
	Totals  Totals   `json:"totals"`
}

// Totals is the sum of the tenants' windows and lines.
type Totals struct {
	Requests int64 `json:"requests"`
	Tokens   int64 `json:"tokens"`
	InFlight int64 `json:"in_flight"`
	Queued   int64 `json:"queued"`
}

// Add adds a tenant's usage and queue.
func (t *Totals) Add(u Usage, queued int64) {
	t.Requests += u.Requests.Used
	t.Tokens += u.Tokens.Used
	t.InFlight += u.InFlight.Used
	t.Queued += queued
}

// Remove takes a tenant's usage and queue out again.
func (t *Totals) Remove(u Usage, queued int64) {
	t.Requests -= u.Requests.Used
	t.Tokens -= u.Tokens.Used
	t.InFlight -= u.InFlight.Used
	t.Queued -= queued
}

// Sum adds another's totals.
func (t *Totals) Sum(o Totals) {
	t.Requests += o.Requests
	t.Tokens += o.Tokens
	t.InFlight += o.InFlight
	t.Queued += o.Queued
}

// Rebalance is one ring change a node logged (the "rebalance" log event),
// as the status page lists it.
type Rebalance struct {
	At          time.Time      `json:"at"`
	RingVersion uint64         `json:"ring_version"`
	Members     []string       `json:"members"`
	Moved       int            `json:"moved"`
	HandedOver  int            `json:"handed_over"`
	TakenOver   int            `json:"taken_over"`
	State       map[string]int `json:"state,omitempty"` // how the taken-over tenants' state arrived
	HandoffMs   int64          `json:"handoff_ms"`
}

// Busier orders two tenants busiest first: the fuller of their windows
// against its limit, then what waits in their queues, then requests, then
// name. It is the one ordering of the status page's tenants.
func Busier(a Usage, aQueued int64, aName string, b Usage, bQueued int64, bName string) int {
	return cmp.Or(
		cmp.Compare(fullness(b), fullness(a)),
		cmp.Compare(bQueued, aQueued),
		cmp.Compare(b.Requests.Used, a.Requests.Used),
		cmp.Compare(aName, bName),
	)
}

// fullness is the fullest of u's dimensions against its limit, in
// thousandths; a dimension without a limit counts as empty.
func fullness(u Usage) int64 {
	var f int64
	for _, d := range []Dimension{u.Requests, u.Tokens, u.InFlight} {
		if d.Limit > 0 {
			f = max(f, d.Used*1000/d.Limit)
		}
	}
	return f
}

// UsageOfTenant is a tenant view's windows as a Usage.
func UsageOfTenant(t Tenant) Usage {
	return Usage{Requests: t.Requests, Tokens: t.Tokens, InFlight: t.InFlight}
}
