package adminview

import (
	"slices"
	"strings"

	"github.com/ringgate/ringgate/router/internal/status"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// UINode is this node's own part of /ui/state: its leases and queues,
// its last rebalances, and the tenants it owns (owns says which, by the
// node's ring) whose names contain filter: the busiest limit of them, how
// many matched, and their totals.
func (s Source) UINode(owns func(entity string) bool, filter string, limit int) status.UINode {
	st := s.State.Load()
	now := s.Clock()
	out := status.UINode{Node: s.Node, Window: st.Cfg.Limits.Window.String(), Upstreams: s.Upstreams().Upstreams}
	if s.Rebalances != nil {
		out.Rebalances = s.Rebalances()
	}
	type ranked struct {
		t      *tenant.Tenant
		u      status.Usage
		queued int64
	}
	var all []ranked
	for _, name := range st.Names {
		t := st.ByName[name]
		if t.Kind != tenant.KindTenant || !strings.Contains(name, filter) || !owns(t.Name) {
			continue
		}
		q := status.QueueOf(t.OwnLines()...)
		r := ranked{t: t, u: status.UsageOf(t.Usage(now)), queued: int64(q.Interactive.Waiting + q.Batch.Waiting)}
		out.Totals.Add(r.u, r.queued)
		all = append(all, r)
	}
	slices.SortFunc(all, func(a, b ranked) int { return status.Busier(a.u, a.queued, a.t.Name, b.u, b.queued, b.t.Name) })
	out.Matched = len(all)
	for _, r := range all[:min(limit, len(all))] {
		_, view, _ := s.Tenant(r.t.Name)
		out.Tenants = append(out.Tenants, view(s.Node, ""))
	}
	return out
}
