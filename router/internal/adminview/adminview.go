// Package adminview builds what the admin endpoints show of this node:
// /cluster, /upstreams, this node's view of a tenant or a team, and its
// part of the status page's /ui/state (with the last rebalances it
// keeps), as the values of package status, read from the tenant model
// (package tenant: the config in force, its entities, their limiters and
// lines) and the providers' budgets.
//
// It owns the reading of those into their JSON shapes. It knows nothing of
// requests, rings, hops or HTTP: what it needs of the node (its name, its
// clock, the cluster view in force, a tenant's spillover) is given to it as
// a Source's fields; package admin asks a Source, and the router makes one.
package adminview

import (
	"strings"
	"sync/atomic"

	"github.com/ringgate/ringgate/router/internal/status"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// Source is the node's state as the admin endpoints show it (the
// admin.Source of package admin).
type Source struct {
	Node  string                        // this node's name
	State *atomic.Pointer[tenant.State] // the config and entities in force
	Clock func() int64                  // the windows' clock, Unix ns
	// Spill is a tenant's spillover as /tenants/{name} shows it.
	Spill func(t *tenant.Tenant) status.Spill
	// Members is the cluster view in force: its live members, sorted by
	// name, and its ring's version; ok is false before the first view.
	Members func() (members []status.Member, ringVersion uint64, ok bool)
	// Draining reports whether the node is draining.
	Draining func() bool
	// LastReload is the outcome of the last reload, for /cluster; nil
	// before one.
	LastReload func() *status.Reload
	// Rebalances are the last ring changes this node logged, oldest
	// first; nil: none kept.
	Rebalances func() []status.Rebalance
}

// Team finds the team named name: its entity, and the making of this
// node's view of it.
func (s Source) Team(name string) (string, func(owner, ownerError string) status.Team, bool) {
	st := s.State.Load()
	e := st.ByName[tenant.TeamEntity(name)]
	if e == nil || e.Kind != tenant.KindTeam || strings.Contains(name, "/") {
		return "", nil, false
	}
	return e.Name, func(owner, ownerError string) status.Team {
		now := s.Clock()
		tv := status.Team{Name: name, Owner: owner, Node: s.Node, OwnerError: ownerError, Window: st.Cfg.Limits.Window.String(), Mode: e.Mode(),
			Usage: status.UsageOf(e.Usage(now)), Tenants: make(map[string]status.Usage, len(e.Members))}
		for _, m := range e.Members {
			tv.Tenants[m.Name] = status.UsageOf(m.Usage(now))
		}
		return tv
	}, true
}

// Tenant finds the tenant named name: its entity, and the making of this
// node's view of it.
func (s Source) Tenant(name string) (string, func(owner, ownerError string) status.Tenant, bool) {
	st := s.State.Load()
	t := st.ByName[name]
	if t == nil || t.Kind != tenant.KindTenant {
		return "", nil, false
	}
	return t.Name, func(owner, ownerError string) status.Tenant {
		u := t.Usage(s.Clock())
		q := status.QueueOf(t.OwnLines()...)
		return status.Tenant{
			Name:       t.Name,
			Owner:      owner,
			Node:       s.Node,
			OwnerError: ownerError,
			Priority:   t.Priority,
			Window:     st.Cfg.Limits.Window.String(),
			Requests:   status.Dimension{Used: u.Requests, Limit: max(u.Limits.Requests, 0)},
			Tokens:     status.Dimension{Used: u.Tokens, Limit: max(u.Limits.Tokens, 0)},
			InFlight:   status.Dimension{Used: u.InFlight, Limit: max(u.Limits.Concurrency, 0)},
			Queued:     int64(q.Interactive.Waiting + q.Batch.Waiting),
			Queue:      q,
			Spillover:  s.Spill(t),
			Team:       strings.TrimPrefix(teamName(t), "team/"),
			ModelLimits: func() map[string]status.Usage {
				if t.Models == nil {
					return nil
				}
				out := make(map[string]status.Usage, len(t.Models))
				for model, e := range t.Models {
					out[model] = status.UsageOf(e.Usage(s.Clock()))
				}
				return out
			}(),
			Mode: t.Mode(),
		}
	}, true
}

// teamName is the entity name of t's team, "" for none.
func teamName(t *tenant.Tenant) string {
	if t.Team == nil {
		return ""
	}
	return t.Team.Name
}
