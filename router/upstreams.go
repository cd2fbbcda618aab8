package router

import "github.com/ringgate/ringgate/router/internal/status"

func (r *Router) upstreamsView() status.Upstreams {
	st := r.state.Load()
	now := r.clock()
	out := status.Upstreams{Node: r.node, Window: st.Cfg.Limits.Window.String()}
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
