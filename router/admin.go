package router

import (
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/router/internal/admin"
	"github.com/ringgate/ringgate/router/internal/status"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// serveAdmin answers the admin endpoints (package admin), with a handler
// made at the first of them.
func (r *Router) serveAdmin(ctx *fasthttp.RequestCtx) {
	r.adminServe.once.Do(func() {
		r.adminServe.handler = admin.New(admin.Config{
			Node:    r.node,
			Source:  adminSource{r},
			Peers:   adminPeers{r},
			Token:   func() string { return r.state.Load().Cfg.Admin.Token },
			Life:    func() (bool, bool) { return r.life.draining.Load(), r.life.ready.Load() },
			Reload:  r.reload,
			Metrics: r.metrics.Reg,
		})
	})
	r.adminServe.handler.Serve(ctx)
}

// adminServe is the admin endpoints' handler, made once.
type adminServe struct {
	once    sync.Once
	handler *admin.Handler
}

// Member is one node as the admin API shows it.
type Member = status.Member

func (r *Router) clusterView() status.Cluster {
	cv := status.Cluster{Self: r.node, ConfigVersion: r.ConfigVersion(), LastReload: r.reloads.last.Load()}
	v := r.view.Load()
	if v == nil {
		st := "active"
		if r.life.draining.Load() {
			st = "draining"
		}
		cv.Members = []Member{{Name: r.node, Addr: r.state.Load().Cfg.Node.Listen, State: st, ConfigVersion: cv.ConfigVersion}}
		return cv
	}
	cv.RingVersion, cv.Members = v.version(), v.members
	for _, m := range v.members {
		// A member that says no version (one that predates them, or runs
		// a config made in code) counts as another one.
		if m.Name != r.node && m.ConfigVersion != cv.ConfigVersion {
			cv.ConfigsDiffer = true
		}
	}
	return cv
}

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

// adminSource is the router's own state as the admin endpoints show it
// (admin.Source).
type adminSource struct{ r *Router }

func (s adminSource) Cluster() status.Cluster     { return s.r.clusterView() }
func (s adminSource) Upstreams() status.Upstreams { return s.r.upstreamsView() }

func (s adminSource) Team(name string) (string, func(owner, ownerError string) status.Team, bool) {
	r := s.r
	st := r.state.Load()
	e := st.ByName[tenant.TeamEntity(name)]
	if e == nil || e.Kind != tenant.KindTeam || strings.Contains(name, "/") {
		return "", nil, false
	}
	return e.Name, func(owner, ownerError string) status.Team {
		now := r.clock()
		tv := status.Team{Name: name, Owner: owner, Node: r.node, OwnerError: ownerError, Window: st.Cfg.Limits.Window.String(), Mode: e.Mode(),
			Usage: status.UsageOf(e.Usage(now)), Tenants: make(map[string]status.Usage, len(e.Members))}
		for _, m := range e.Members {
			tv.Tenants[m.Name] = status.UsageOf(m.Usage(now))
		}
		return tv
	}, true
}

func (s adminSource) Tenant(name string) (string, func(owner, ownerError string) status.Tenant, bool) {
	r := s.r
	st := r.state.Load()
	t := st.ByName[name]
	if t == nil || t.Kind != tenant.KindTenant {
		return "", nil, false
	}
	return t.Name, func(owner, ownerError string) status.Tenant {
		u := t.Usage(r.clock())
		q := status.QueueOf(t.OwnLines()...)
		return status.Tenant{
			Name:       t.Name,
			Owner:      owner,
			Node:       r.node,
			OwnerError: ownerError,
			Priority:   t.Priority,
			Window:     st.Cfg.Limits.Window.String(),
			Requests:   status.Dimension{Used: u.Requests, Limit: max(u.Limits.Requests, 0)},
			Tokens:     status.Dimension{Used: u.Tokens, Limit: max(u.Limits.Tokens, 0)},
			InFlight:   status.Dimension{Used: u.InFlight, Limit: max(u.Limits.Concurrency, 0)},
			Queued:     int64(q.Interactive.Waiting + q.Batch.Waiting),
			Queue:      q,
			Spillover:  r.spillView(t),
			Team:       strings.TrimPrefix(teamName(t), "team/"),
			ModelLimits: func() map[string]status.Usage {
				if t.Models == nil {
					return nil
				}
				out := make(map[string]status.Usage, len(t.Models))
				for model, e := range t.Models {
					out[model] = status.UsageOf(e.Usage(r.clock()))
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

// adminPeers is the cluster as the admin endpoints reach it
// (admin.Peers).
type adminPeers struct{ r *Router }

func (p adminPeers) Owner(entity string) string { return p.r.view.Load().owner(entity) }

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
	names := make([]string, len(v.members))
	for i, m := range v.members {
		names[i] = m.Name
	}
	return admin.View{Members: names, Addrs: v.addrs, Signed: r.hops.Enabled(),
		Ask: func(addr, node, uri string, timeout time.Duration) (int, []byte, error) {
			return r.peerDo(v, addr, node, fasthttp.MethodGet, uri, nil, 1, timeout)
		}}
}

// Register adds a collector (the node's snapshot store counters, say) to
// the node's /metrics.
func (r *Router) Register(c prometheus.Collector) error { return r.metrics.Reg.Register(c) }

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) { admin.WriteJSON(ctx, status, v) }
