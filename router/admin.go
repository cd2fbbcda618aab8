package router

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"github.com/valyala/fasthttp/pprofhandler"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/router/internal/status"
)

// serveAdmin answers the health, cluster, tenant and metrics endpoints.
// Health checks are open (load balancers call them); the rest needs the
// admin token, or a loopback caller when no token is configured.
func (r *Router) serveAdmin(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	switch path {
	case "/healthz":
		writeJSON(ctx, fasthttp.StatusOK, map[string]string{"status": "ok"})
		return
	case "/readyz":
		if r.life.draining.Load() {
			writeJSON(ctx, fasthttp.StatusServiceUnavailable, map[string]string{"status": "draining"})
			return
		}
		if !r.life.ready.Load() {
			writeJSON(ctx, fasthttp.StatusServiceUnavailable, map[string]string{"status": "joining"})
			return
		}
		writeJSON(ctx, fasthttp.StatusOK, map[string]string{"status": "ready"})
		return
	}
	profiling := strings.HasPrefix(path, "/debug/pprof/")
	if path != "/cluster" && path != "/metrics" && path != "/upstreams" && path != "/admin/reload" &&
		!strings.HasPrefix(path, "/tenants/") && !strings.HasPrefix(path, "/teams/") && !profiling {
		fail(ctx, fasthttp.StatusNotFound, "invalid_request_error", "not_found", "Unknown path "+path+".")
		return
	}
	method := "GET"
	if path == "/admin/reload" {
		method = "POST"
	}
	if string(ctx.Method()) != method {
		ctx.Response.Header.Set("Allow", method)
		fail(ctx, fasthttp.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "Use "+method+".")
		return
	}
	view := strings.HasPrefix(path, "/tenants/") || strings.HasPrefix(path, "/teams/")
	fromPeer := len(ctx.Request.Header.Peek(hopHeader)) > 0
	switch {
	case fromPeer && (view || path == "/upstreams"):
		// A node asking the owner for its view (fromOwner), or a member
		// for its leases (peerUpstreams), signed with the cluster
		// secret in place of the admin token.
		if _, err := r.hops.Verify(&ctx.Request, r.node); err != nil {
			r.metrics.HopsRefused.Inc()
			fail(ctx, fasthttp.StatusUnauthorized, "invalid_request_error", "invalid_peer_signature",
				"Peer request refused: "+err.Error()+".")
			return
		}
	case !r.adminAllowed(ctx):
		fail(ctx, fasthttp.StatusUnauthorized, "invalid_request_error", "invalid_admin_token",
			"The admin API needs 'Authorization: Bearer <admin token>' (or, with no token configured, a loopback caller).")
		return
	}
	// A peer's question is answered with this node's own view, never
	// passed on: no loop whatever the rings say.
	local := fromPeer || ctx.QueryArgs().GetBool("local")
	switch {
	case profiling:
		// Go's profiles (net/http/pprof's endpoints): what the request
		// path costs under load, read with `go tool pprof`.
		pprofhandler.PprofHandler(ctx)
	case path == "/metrics":
		r.metricsHandler(ctx)
	case path == "/cluster":
		writeJSON(ctx, fasthttp.StatusOK, r.clusterView())
	case path == "/admin/reload":
		r.serveReload(ctx)
	case path == "/upstreams":
		r.serveUpstreams(ctx, local)
	case strings.HasPrefix(path, "/teams/"):
		r.serveTeam(ctx, strings.TrimPrefix(path, "/teams/"), local, fromPeer)
	default:
		r.serveTenant(ctx, strings.TrimPrefix(path, "/tenants/"), local, fromPeer)
	}
}

// ownerViewTimeout bounds the wait for the owner's view of a tenant or a
// team.
const ownerViewTimeout = time.Second

// fromOwner answers a view of a tenant or team that owner, another node,
// owns with the owner's own view: this node's usage of it is at most its
// fallback share's. It returns "" when it answered, else why it could not
// (the owner unreachable, or not answering 200: it may not know the name
// yet in a rolling reload); the caller then answers with its own view.
func (r *Router) fromOwner(ctx *fasthttp.RequestCtx, owner string) string {
	v := r.view.Load()
	addr := ""
	if v != nil {
		addr = v.addrs[owner]
	}
	if addr == "" || !r.hops.Enabled() {
		return "no address for the owner, or no cluster secret to ask it with"
	}
	code, body, err := r.peerDo(v, addr, owner, fasthttp.MethodGet, string(ctx.URI().RequestURI()), nil, 1, ownerViewTimeout)
	switch {
	case err != nil:
		return err.Error()
	case code != fasthttp.StatusOK:
		return fmt.Sprintf("%s answered %d: %.200s", owner, code, body)
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
	return ""
}

func (r *Router) adminAllowed(ctx *fasthttp.RequestCtx) bool {
	token := r.state.Load().cfg.Admin.Token
	if token == "" {
		ip := ctx.RemoteIP()
		return ip != nil && ip.IsLoopback()
	}
	got := ctx.Request.Header.Peek("Authorization")
	if len(got) < 7 || !bytes.EqualFold(got[:7], []byte("Bearer ")) {
		return false
	}
	return subtle.ConstantTimeCompare(bytes.TrimSpace(got[7:]), []byte(token)) == 1
}

// Member is one node as the admin API shows it.
type Member struct {
	Name  string `json:"name"`
	Addr  string `json:"addr"`
	State string `json:"state"`
	// ConfigVersion is the version of the config file the member runs
	// (config.Config.Fingerprint), as it gossips it; "" when it says none.
	ConfigVersion string `json:"config_version,omitempty"`
	// CannotReachSelf: the member says it cannot reach this node over
	// HTTP and admits fallback shares of the tenants this node owns.
	CannotReachSelf bool `json:"cannot_reach_self,omitempty"`
}

type clusterView struct {
	Self          string `json:"self"`
	RingVersion   uint64 `json:"ring_version"`
	ConfigVersion string `json:"config_version,omitempty"` // this node's
	// ConfigsDiffer: members run config files of different versions
	// (a rolling reload half done, or a node left behind).
	ConfigsDiffer bool          `json:"configs_differ"`
	LastReload    *ReloadResult `json:"last_reload,omitempty"`
	Members       []Member      `json:"members"`
}

func (r *Router) clusterView() clusterView {
	cv := clusterView{Self: r.node, ConfigVersion: r.ConfigVersion(), LastReload: r.reloads.last.Load()}
	v := r.view.Load()
	if v == nil {
		st := "active"
		if r.life.draining.Load() {
			st = "draining"
		}
		cv.Members = []Member{{Name: r.node, Addr: r.state.Load().cfg.Node.Listen, State: st, ConfigVersion: cv.ConfigVersion}}
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
type ReloadResult struct {
	At      time.Time `json:"at"`
	Trigger string    `json:"trigger"` // "sighup" or "admin"
	OK      bool      `json:"ok"`
	// Error is why the new config was refused (the old one runs on).
	Error string `json:"error,omitempty"`
	// ConfigVersion is the version running after it.
	ConfigVersion string `json:"config_version,omitempty"`
	// RestartRequired names the tables the new file changed that a
	// reload does not apply (node, cluster, redis): they keep their old
	// values until a restart.
	RestartRequired []string `json:"restart_required,omitempty"`
}

// SetReloader gives the router what POST /admin/reload runs: it reads the
// config from its source and applies it (the node's). Without one the
// endpoint answers 409.
func (r *Router) SetReloader(reload func(trigger string) ReloadResult) {
	r.reloads.reloader.Store(&reload)
}

// Config is the config in force (read only).
func (r *Router) Config() *config.Config { return r.state.Load().cfg }

// ConfigVersion is the version of the config in force.
func (r *Router) ConfigVersion() string { return r.state.Load().version }

// NoteReload records the outcome of a reload for /cluster.
func (r *Router) NoteReload(res ReloadResult) {
	r.reloads.last.Store(&res)
}

// serveReload answers POST /admin/reload: 200 with the version now
// running, or 400 with why the config was refused (the old one runs on).
func (r *Router) serveReload(ctx *fasthttp.RequestCtx) {
	reload := r.reloads.reloader.Load()
	if reload == nil {
		fail(ctx, fasthttp.StatusConflict, "invalid_request_error", "no_config_source", "This node was not started from a config source it can read again.")
		return
	}
	res := (*reload)("admin")
	if !res.OK {
		fail(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "invalid_config", "Config refused, the old one keeps running: "+res.Error)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"status": "reloaded", "config_version": res.ConfigVersion, "at": res.At})
}

func (t *tenant) mode() string {
	if t.shadow {
		return config.ModeShadow
	}
	return config.ModeEnforce
}

// ownerView finds the owner of entity (a tenant or a team, named name to
// the client) by this node's ring and, unless the view asked for is this
// node's own (local), answers with the owner's view when another node owns
// it. answered: ctx holds the answer (the owner's view, or a peer's
// question refused because this node's ring names another owner: a ring
// change under way, its figures not the owner's). Otherwise the caller
// answers with this node's view, ownerError saying why the owner's could
// not be had ("" when this node owns it or local was asked).
func (r *Router) ownerView(ctx *fasthttp.RequestCtx, entity, name string, local, fromPeer bool) (owner, ownerError string, answered bool) {
	owner = r.view.Load().owner(entity)
	if owner == "" || owner == r.node {
		return r.node, "", false
	}
	if fromPeer {
		fail(ctx, fasthttp.StatusConflict, "invalid_request_error", "not_owner",
			"By this node's ring, "+owner+" owns "+name+".")
		return owner, "", true
	}
	if local {
		return owner, "", false
	}
	ownerError = r.fromOwner(ctx, owner)
	return owner, ownerError, ownerError == ""
}

func (r *Router) serveTeam(ctx *fasthttp.RequestCtx, name string, local, fromPeer bool) {
	st := r.state.Load()
	e := st.byName[teamEntity(name)]
	if e == nil || e.kind != kindTeam || strings.Contains(name, "/") {
		fail(ctx, fasthttp.StatusNotFound, "invalid_request_error", "unknown_team", "No team named "+name+".")
		return
	}
	owner, ownerError, answered := r.ownerView(ctx, e.name, name, local, fromPeer)
	if answered {
		return
	}
	now := r.clock()
	tv := status.Team{Name: name, Owner: owner, Node: r.node, OwnerError: ownerError, Window: st.cfg.Limits.Window.String(), Mode: e.mode(),
		Usage: status.UsageOf(e.usage(now)), Tenants: make(map[string]status.Usage, len(e.members))}
	for _, m := range e.members {
		tv.Tenants[m.name] = status.UsageOf(m.usage(now))
	}
	writeJSON(ctx, fasthttp.StatusOK, tv)
}

func (r *Router) serveTenant(ctx *fasthttp.RequestCtx, name string, local, fromPeer bool) {
	st := r.state.Load()
	t := st.byName[name]
	if t == nil || t.kind != kindTenant {
		fail(ctx, fasthttp.StatusNotFound, "invalid_request_error", "unknown_tenant", "No tenant named "+name+".")
		return
	}
	owner, ownerError, answered := r.ownerView(ctx, t.name, name, local, fromPeer)
	if answered {
		return
	}
	u := t.usage(r.clock())
	q := status.QueueOf(t.ownLines()...)
	writeJSON(ctx, fasthttp.StatusOK, status.Tenant{
		Name:       t.name,
		Owner:      owner,
		Node:       r.node,
		OwnerError: ownerError,
		Priority:   t.priority,
		Window:     st.cfg.Limits.Window.String(),
		Requests:   status.Dimension{Used: u.Requests, Limit: max(u.Limits.Requests, 0)},
		Tokens:     status.Dimension{Used: u.Tokens, Limit: max(u.Limits.Tokens, 0)},
		InFlight:   status.Dimension{Used: u.InFlight, Limit: max(u.Limits.Concurrency, 0)},
		Queued:     int64(q.Interactive.Waiting + q.Batch.Waiting),
		Queue:      q,
		Spillover:  r.spillView(t),
		Team:       strings.TrimPrefix(teamName(t), "team/"),
		ModelLimits: func() map[string]status.Usage {
			if t.models == nil {
				return nil
			}
			out := make(map[string]status.Usage, len(t.models))
			for model, e := range t.models {
				out[model] = status.UsageOf(e.usage(r.clock()))
			}
			return out
		}(),
		Mode: t.mode(),
	})
}

// teamName is the entity name of t's team, "" for none.
func teamName(t *tenant) string {
	if t.team == nil {
		return ""
	}
	return t.team.name
}

func (r *Router) metricsHandler(ctx *fasthttp.RequestCtx) {
	r.metricsServe.once.Do(func() {
		r.metricsServe.handler = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(r.metrics.Reg, promhttp.HandlerOpts{}))
	})
	r.metricsServe.handler(ctx)
}

// Register adds a collector (the node's snapshot store counters, say) to
// the node's /metrics.
func (r *Router) Register(c prometheus.Collector) error { return r.metrics.Reg.Register(c) }

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fail(ctx, fasthttp.StatusInternalServerError, "server_error", "encode", err.Error())
		return
	}
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetStatusCode(status)
	ctx.SetBody(b)
}
