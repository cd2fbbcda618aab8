// Package status holds what the admin endpoints answer: the JSON shapes
// of /cluster, /tenants, /teams, /upstreams and /ui/state, and their
// making from the limiter's, the queues' and the leases' figures, and the
// one ordering of tenants by how busy they are (Busier). The shapes are
// the operator's contract; the router fills them. It knows nothing of how
// requests are decided.
package status

import (
	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
)

// Dimension is one dimension of a limit: what its window holds, and its
// limit.
type Dimension struct {
	Used  int64 `json:"used"`
	Limit int64 `json:"limit"` // 0: no limit
}

// Queue is a queue by class, as /tenants and /upstreams show it.
type Queue struct {
	Interactive ClassQueue `json:"interactive"`
	Batch       ClassQueue `json:"batch"`
}

// ClassQueue is one class of a queue.
type ClassQueue struct {
	Waiting  int   `json:"waiting"`
	OldestMs int64 `json:"oldest_ms"` // how long the longest-waiting one has waited
}

// QueueOf is the lines qs together, by class.
func QueueOf(qs ...*queue.Queue) Queue {
	class := func(c queue.Class) ClassQueue {
		var cq ClassQueue
		for _, q := range qs {
			cq.Waiting += q.Depth(c)
			cq.OldestMs = max(cq.OldestMs, q.Oldest(c).Milliseconds())
		}
		return cq
	}
	return Queue{Interactive: class(queue.Interactive), Batch: class(queue.Batch)}
}

// Tenant is /tenants/{name}: the tenant's windows against its limits,
// its queue, who decides for it, and its levels.
type Tenant struct {
	Name  string `json:"name"`
	Owner string `json:"owner"`
	Node  string `json:"node"`
	// OwnerError says why the owner, another node, was not asked for its
	// view: the answer is this node's own.
	OwnerError string    `json:"owner_error,omitempty"`
	Priority   string    `json:"priority"`
	Window     string    `json:"window"`
	Requests   Dimension `json:"requests"`
	Tokens     Dimension `json:"tokens"`
	InFlight   Dimension `json:"in_flight"`
	Queued     int64     `json:"queued"` // in the tenant's queue, both classes
	Queue      Queue     `json:"queue"`
	// Spillover says who decides for the tenant: its owner, or every node
	// on its leased budget (the router's spill).
	Spillover Spill `json:"spillover"`
	// Team is the tenant's team ("" for none); ModelLimits its own
	// per-model limits, by model.
	Team        string           `json:"team,omitempty"`
	ModelLimits map[string]Usage `json:"model_limits,omitempty"`
	Mode        string           `json:"mode"`
}

// Usage is one level's windows against its limits.
type Usage struct {
	Requests Dimension `json:"requests"`
	Tokens   Dimension `json:"tokens"`
	InFlight Dimension `json:"in_flight"`
}

// UsageOf is a limiter's usage as the views show it.
func UsageOf(u limiter.Usage) Usage {
	return Usage{
		Requests: Dimension{Used: u.Requests, Limit: max(u.Limits.Requests, 0)},
		Tokens:   Dimension{Used: u.Tokens, Limit: max(u.Limits.Tokens, 0)},
		InFlight: Dimension{Used: u.InFlight, Limit: max(u.Limits.Concurrency, 0)},
	}
}

// Team is /teams/{name}: the team's windows against its limits, and
// each of its tenants' own usage.
type Team struct {
	Name  string `json:"name"`
	Owner string `json:"owner"`
	Node  string `json:"node"`
	// OwnerError: as Tenant's.
	OwnerError string `json:"owner_error,omitempty"`
	Window     string `json:"window"`
	Mode       string `json:"mode"`
	Usage
	Tenants map[string]Usage `json:"tenants"`
}

// Budget is one budget (an upstream's or a model's) as /upstreams
// shows it: the provider's limits, what this node holds of them and what
// the cluster's window held at this node's last grant.
type Budget struct {
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
	// stated of the model's limit (the router's learned limits), not from the config.
	Learned *Learned `json:"learned,omitempty"`
	// Share is this node's part of the budget in the cluster-wide
	// division among the tenants that want it, and what its tenants
	// want; absent before the first division, or with no demand here.
	Share       *Share `json:"fair_share,omitempty"`
	Grants      uint64 `json:"grants"`
	EmptyGrants uint64 `json:"empty_grants"`
	GiveBacks   uint64 `json:"give_backs"`
	StoreErrors uint64 `json:"store_errors"`
	Degraded    bool   `json:"degraded"`
	DegradedMs  int64  `json:"degraded_ms"`
	OnRedisDown string `json:"on_redis_down"`
	Queue       Queue  `json:"queue"` // requests waiting on this node for the budget
}

// Learned is a learned model limit: what the provider stated, in
// which header, since when.
type Learned struct {
	Requests int64  `json:"requests,omitempty"`
	Tokens   int64  `json:"tokens,omitempty"`
	From     string `json:"from"`
	Since    string `json:"since"`
}

// Share is a node's part of a budget divided among the cluster's
// tenants by weight: per window, and slots.
type Share struct {
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

// Upstream is one upstream's budgets.
type Upstream struct {
	Name   string             `json:"name"`
	Kind   string             `json:"kind"`
	Limits *Budget            `json:"budget,omitempty"` // nil: no upstream-wide limit
	Models map[string]*Budget `json:"models,omitempty"`
}

// Upstreams is /upstreams: this node's budgets, and its peers'.
type Upstreams struct {
	Node      string     `json:"node"`
	Window    string     `json:"window"`
	Upstreams []Upstream `json:"upstreams"`
	// Peers is every other member's own view, asked of it: its leases,
	// queues and counters. Absent with ?local=1 (how a member is asked)
	// and on a node alone.
	Peers []PeerUpstreams `json:"peers,omitempty"`
}

// PeerUpstreams is a member's own /upstreams, or why it is missing.
type PeerUpstreams struct {
	Node      string     `json:"node"`
	Error     string     `json:"error,omitempty"`
	Upstreams []Upstream `json:"upstreams,omitempty"`
}

// BudgetOf is a budget as /upstreams shows it, from its stats, its line
// and what it does with Redis down.
func BudgetOf(s lease.Stats, line *queue.Queue, down string) *Budget {
	v := &Budget{}
	v.Queue = QueueOf(line)
	v.Limits.Requests, v.Limits.Tokens, v.Limits.Concurrency = s.Limits.Requests, s.Limits.Tokens, s.Limits.Concurrency
	v.InForce.Requests, v.InForce.Tokens, v.Corrections = s.Learned.Requests, s.Learned.Tokens, s.Corrections
	v.Lease.Blocks, v.Lease.LeftRequests, v.Lease.LeftTokens = s.Blocks, s.Left.Requests, s.Left.Tokens
	v.Lease.SlotsHeld, v.Lease.SlotsInFlight = s.SlotsHeld, s.SlotsUsed
	v.Window.Requests, v.Window.Tokens = s.Used.Requests, s.Used.Tokens
	v.Grants, v.EmptyGrants, v.GiveBacks, v.StoreErrors = s.Grants, s.Empty, s.Returns, s.StoreErrors
	v.Degraded, v.DegradedMs = s.Degraded, s.DegradedFor.Milliseconds()
	v.OnRedisDown = down
	if s.Divided {
		sv := &Share{Requests: s.Part.Requests, Tokens: s.Part.Tokens, Concurrency: s.PartSlots, Nodes: s.Nodes, PartSpent: s.PartSpent}
		sv.Wanted.Requests, sv.Wanted.Tokens, sv.Wanted.Concurrency = s.Demand.Requests, s.Demand.Tokens, s.DemandSlots
		v.Share = sv
	}
	return v
}

// Spill is a tenant's spillover as /tenants/{name} shows it.
type Spill struct {
	Mode    string `json:"mode"` // "owner": its owner decides; "spill": every node, on the leased budget
	Owner   string `json:"owner,omitempty"`
	Budget  string `json:"budget,omitempty"`
	SinceMs int64  `json:"since_ms,omitempty"`
	// This node's part of the budget.
	Blocks    int   `json:"blocks,omitempty"`
	LeftReq   int64 `json:"left_requests,omitempty"`
	LeftTok   int64 `json:"left_tokens,omitempty"`
	SlotsHeld int64 `json:"slots_held,omitempty"`
	SlotsUsed int64 `json:"slots_used,omitempty"`
	// The store's window after this node's last grant (every node's).
	WindowReq int64 `json:"window_requests,omitempty"`
	WindowTok int64 `json:"window_tokens,omitempty"`
	Degraded  bool  `json:"degraded,omitempty"`
}
