package router

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/router/internal/admin"
	"github.com/ringgate/ringgate/router/internal/adminview"
	"github.com/ringgate/ringgate/router/internal/status"
)

// serveAdmin answers the admin endpoints (package admin), with a handler
// made at the first of them.
func (r *Router) serveAdmin(ctx *fasthttp.RequestCtx) {
	r.adminServe.once.Do(func() {
		r.adminServe.handler = admin.New(admin.Config{
			Node:    r.node,
			Source:  r.adminView(),
			Peers:   adminPeers{r},
			Token:   func() string { return r.state.Load().Cfg.Admin.Token },
			Life:    func() (bool, bool) { return r.life.drain.Draining(), r.life.ready.Load() },
			Reload:  r.reload,
			Metrics: r.metrics.Reg,
		})
	})
	r.adminServe.handler.Serve(ctx)
}

// adminServe is the admin endpoints' handler, made once, and the last
// rebalances, which only the status page shows.
type adminServe struct {
	once       sync.Once
	handler    *admin.Handler
	rebalances adminview.Rebalances
}

// Rebalance is one ring change as the node logged it.
type Rebalance = status.Rebalance

// NoteRebalance keeps a ring change the node logged for the status page.
func (r *Router) NoteRebalance(ev Rebalance) { r.adminServe.rebalances.Note(ev, r.clock()) }

// Member is one node as the admin API shows it.
type Member = status.Member

// ReloadResult is the outcome of a reload of the config from its source
// (its file, its flags): SIGHUP or POST /admin/reload.
type ReloadResult = status.Reload

// SetReloader gives the router what POST /admin/reload runs: it reads the
// config from its source and applies it (the node's). Without one the
// endpoint answers 409.
func (r *Router) SetReloader(reload func(trigger string) ReloadResult) {
	r.reloads.reloader.Store(&reload)
}

// reload runs the reloader; ok is false without one.
func (r *Router) reload(trigger string) (res ReloadResult, ok bool) {
	reload := r.reloads.reloader.Load()
	if reload == nil {
		return ReloadResult{}, false
	}
	return (*reload)(trigger), true
}

// Config is the config in force (read only).
func (r *Router) Config() *config.Config { return r.state.Load().Cfg }

// ConfigVersion is the version of the config in force.
func (r *Router) ConfigVersion() string { return r.state.Load().Version }

// NoteReload records the outcome of a reload for /cluster.
func (r *Router) NoteReload(res ReloadResult) {
	r.reloads.last.Store(&res)
}

// adminView is the router's own state as the admin endpoints show it
// (admin.Source), and /cluster's for the view's gauges.
func (r *Router) adminView() adminview.Source {
	return adminview.Source{
		Node:  r.node,
		State: &r.state,
		Clock: r.clock,
		Spill: r.spills.View,
		Members: func() ([]Member, uint64, bool) {
			v := r.view.Load()
			if v == nil {
				return nil, 0, false
			}
			return v.Members(), v.Version(), true
		},
		Draining:   r.life.drain.Draining,
		LastReload: r.reloads.last.Load,
		Rebalances: r.adminServe.rebalances.List,
	}
}

// adminPeers is the cluster as the admin endpoints reach it
// (admin.Peers).
type adminPeers struct{ r *Router }

func (p adminPeers) Owner(entity string) string { return p.r.view.Load().Owner(entity) }

func (p adminPeers) Verify(req *fasthttp.Request) error {
	if _, err := p.r.hops.Verify(req, p.r.node); err != nil {
		p.r.metrics.HopsRefused.Inc()
		return err
	}
	return nil
}

func (p adminPeers) View() admin.View {
	r := p.r
	v := r.view.Load()
	if v == nil {
		return admin.View{Signed: r.hops.Enabled()}
	}
	names := make([]string, len(v.Members()))
	for i, m := range v.Members() {
		names[i] = m.Name
	}
	return admin.View{Members: names, Addrs: v.Addrs(), Signed: r.hops.Enabled(),
		Ask: func(addr, node, uri string, timeout time.Duration) (int, []byte, error) {
			return r.peers.Do(addr, node, fasthttp.MethodGet, uri, nil, r.signPeer(v, node, 1), timeout)
		}}
}

// Register adds a collector (the node's snapshot store counters, say) to
// the node's /metrics.
func (r *Router) Register(c prometheus.Collector) error { return r.metrics.Reg.Register(c) }
