package adminview

import "github.com/ringgate/ringgate/router/internal/status"

// Cluster is /cluster: this node, its config, and the members of the
// cluster view in force (this node alone before the first one).
func (s Source) Cluster() status.Cluster {
	cv := status.Cluster{Self: s.Node, ConfigVersion: s.State.Load().Version, LastReload: s.LastReload()}
	members, ringVersion, ok := s.Members()
	if !ok {
		st := "active"
		if s.Draining() {
			st = "draining"
		}
		cv.Members = []status.Member{{Name: s.Node, Addr: s.State.Load().Cfg.Node.Listen, State: st, ConfigVersion: cv.ConfigVersion}}
		return cv
	}
	cv.RingVersion, cv.Members = ringVersion, members
	for _, m := range members {
		// A member that says no version (one that predates them, or runs
		// a config made in code) counts as another one.
		if m.Name != s.Node && m.ConfigVersion != cv.ConfigVersion {
			cv.ConfigsDiffer = true
		}
	}
	return cv
}

// Upstreams is this node's /upstreams: each upstream's budgets and its
// models', as this node holds them.
func (s Source) Upstreams() status.Upstreams {
	st := s.State.Load()
	now := s.Clock()
	out := status.Upstreams{Node: s.Node, Window: st.Cfg.Limits.Window.String()}
	for i, uc := range st.Cfg.Upstreams {
		uv := status.Upstream{Name: uc.Name, Kind: uc.Kind}
		down := uc.OnRedisDown
		if down == "" {
			down = "share"
		}
		if pb := st.Budgets[st.Providers[i]]; pb != nil {
			uv.Limits, uv.Models = pb.View(now, down)
		}
		out.Upstreams = append(out.Upstreams, uv)
	}
	return out
}
