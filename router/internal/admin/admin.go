// Package admin answers the admin endpoints: /healthz, /readyz, /cluster,
// /tenants/{name}, /teams/{name}, /upstreams, /admin/reload, /metrics,
// Go's profiles, and the status page /ui (its files, package ui) with the
// JSON it polls, /ui/state. It owns their paths and methods, the access rule (the
// admin token, or a loopback caller when none is configured; a member's
// signature for the views one member asks another for), asking the owner
// of a tenant or team for its view and every member for its /upstreams
// and its part of /ui/state, and writing the JSON.
//
// It knows nothing of tenants, limits, rings or how a signature is made:
// it reads the node's own views from a Source as plain status values, and
// reaches the other members through Peers.
package admin

import (
	"bytes"
	"crypto/subtle"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"github.com/valyala/fasthttp/pprofhandler"

	"github.com/ringgate/ringgate/router/internal/hopsign"
	"github.com/ringgate/ringgate/router/internal/reply"
	"github.com/ringgate/ringgate/router/internal/status"
)

// OwnerViewTimeout bounds the wait for the owner's view of a tenant or a
// team, and for each member's /upstreams.
const OwnerViewTimeout = time.Second

// Source is the node's own state as the endpoints show it.
type Source interface {
	// Tenant finds the tenant named name: the entity the ring places, and
	// the making of this node's view of it, given its owner and why the
	// owner's view could not be had. ok is false for no such tenant.
	Tenant(name string) (entity string, view func(owner, ownerError string) status.Tenant, ok bool)
	// Team is Tenant for the team named name.
	Team(name string) (entity string, view func(owner, ownerError string) status.Team, ok bool)
	// Cluster is /cluster; Upstreams this node's own /upstreams.
	Cluster() status.Cluster
	Upstreams() status.Upstreams
	// UINode is this node's own part of /ui/state: the tenants it owns
	// (owns says which) whose names contain filter, the busiest limit of
	// them listed.
	UINode(owns func(entity string) bool, filter string, limit int) status.UINode
}

// Peers is the cluster as the endpoints reach it.
type Peers interface {
	// Owner is the member that owns entity by this node's ring; "" for
	// none known.
	Owner(entity string) string
	// View is the cluster view in force, to ask its members with.
	View() View
	// Verify checks a member's signed request; the error says why it is
	// refused.
	Verify(req *fasthttp.Request) error
}

// View is one view of the cluster: its members and how to ask them.
type View struct {
	// Members are the members' names, sorted, this node's included; nil
	// with no view yet.
	Members []string
	// Addrs are their HTTP addresses, by name.
	Addrs map[string]string
	// Signed: a cluster secret signs the questions; without one no member
	// can be asked.
	Signed bool
	// Ask sends a GET of uri, signed with this view, to the member node at
	// addr, and returns its answer's status and body, within timeout.
	Ask func(addr, node, uri string, timeout time.Duration) (int, []byte, error)
}

// Config is a Handler's.
type Config struct {
	Node   string // this node's name
	Source Source
	Peers  Peers
	// Token is the admin token in force; "": loopback callers only.
	Token func() string
	// Life is where the node is: draining, and ready (joined, holding a
	// ring).
	Life func() (draining, ready bool)
	// Reload reads the config from its source and applies it; ok is false
	// when the node was not started from a source it can read again.
	Reload func(trigger string) (res status.Reload, ok bool)
	// Metrics is what /metrics exports.
	Metrics prometheus.Gatherer
}

// Handler answers the admin endpoints.
type Handler struct {
	cfg     Config
	metrics fasthttp.RequestHandler
}

// New makes a handler.
func New(c Config) *Handler {
	return &Handler{cfg: c, metrics: fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(c.Metrics, promhttp.HandlerOpts{}))}
}

// Serve answers the health, cluster, tenant and metrics endpoints.
// Health checks are open (load balancers call them); the rest needs the
// admin token, or a loopback caller when no token is configured.
func (h *Handler) Serve(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	if h.health(ctx, path) || h.uiAsset(ctx, path) {
		return
	}
	fromPeer, ok := h.admit(ctx, path)
	if !ok {
		return
	}
	// A peer's question is answered with this node's own view, never
	// passed on: no loop whatever the rings say.
	local := fromPeer || ctx.QueryArgs().GetBool("local")
	switch {
	case strings.HasPrefix(path, "/debug/pprof/"):
		// Go's profiles (net/http/pprof's endpoints): what the request
		// path costs under load, read with `go tool pprof`.
		pprofhandler.PprofHandler(ctx)
	case path == "/metrics":
		h.metrics(ctx)
	case path == "/cluster":
		reply.JSON(ctx, fasthttp.StatusOK, h.cfg.Source.Cluster())
	case path == "/admin/reload":
		h.serveReload(ctx)
	case path == "/upstreams":
		h.serveUpstreams(ctx, local)
	case path == "/ui/state":
		h.serveUIState(ctx, local)
	case strings.HasPrefix(path, "/teams/"):
		serveEntity(h, ctx, "team", strings.TrimPrefix(path, "/teams/"), local, fromPeer, h.cfg.Source.Team)
	default:
		serveEntity(h, ctx, "tenant", strings.TrimPrefix(path, "/tenants/"), local, fromPeer, h.cfg.Source.Tenant)
	}
}

// health answers /healthz and /readyz, and reports whether path was one.
func (h *Handler) health(ctx *fasthttp.RequestCtx, path string) bool {
	switch path {
	case "/healthz":
		reply.JSON(ctx, fasthttp.StatusOK, map[string]string{"status": "ok"})
		return true
	case "/readyz":
		draining, ready := h.cfg.Life()
		if draining {
			reply.JSON(ctx, fasthttp.StatusServiceUnavailable, map[string]string{"status": "draining"})
			return true
		}
		if !ready {
			reply.JSON(ctx, fasthttp.StatusServiceUnavailable, map[string]string{"status": "joining"})
			return true
		}
		reply.JSON(ctx, fasthttp.StatusOK, map[string]string{"status": "ready"})
		return true
	}
	return false
}

// admit checks the path, the method and the caller, and answers the
// refusal itself. fromPeer: the request says it is a member's.
func (h *Handler) admit(ctx *fasthttp.RequestCtx, path string) (fromPeer, ok bool) {
	profiling := strings.HasPrefix(path, "/debug/pprof/")
	if path != "/cluster" && path != "/metrics" && path != "/upstreams" && path != "/admin/reload" && path != "/ui/state" &&
		!strings.HasPrefix(path, "/tenants/") && !strings.HasPrefix(path, "/teams/") && !profiling {
		reply.Fail(ctx, fasthttp.StatusNotFound, "invalid_request_error", "not_found", "Unknown path "+path+".")
		return false, false
	}
	method := "GET"
	if path == "/admin/reload" {
		method = "POST"
	}
	if string(ctx.Method()) != method {
		ctx.Response.Header.Set("Allow", method)
		reply.Fail(ctx, fasthttp.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "Use "+method+".")
		return false, false
	}
	view := strings.HasPrefix(path, "/tenants/") || strings.HasPrefix(path, "/teams/")
	fromPeer = len(ctx.Request.Header.Peek(hopsign.HopHeader)) > 0
	switch {
	case fromPeer && (view || path == "/upstreams" || path == "/ui/state"):
		// A node asking the owner for its view (fromOwner), or a member
		// for its leases or its part of the status page (askMembers),
		// signed with the cluster secret in place of the admin token.
		if err := h.cfg.Peers.Verify(&ctx.Request); err != nil {
			reply.Fail(ctx, fasthttp.StatusUnauthorized, "invalid_request_error", "invalid_peer_signature",
				"Peer request refused: "+err.Error()+".")
			return fromPeer, false
		}
	case !h.allowed(ctx):
		reply.Fail(ctx, fasthttp.StatusUnauthorized, "invalid_request_error", "invalid_admin_token",
			"The admin API needs 'Authorization: Bearer <admin token>' (or, with no token configured, a loopback caller).")
		return fromPeer, false
	}
	return fromPeer, true
}

func (h *Handler) allowed(ctx *fasthttp.RequestCtx) bool {
	token := h.cfg.Token()
	if token == "" {
		return loopback(ctx)
	}
	got := ctx.Request.Header.Peek("Authorization")
	if len(got) < 7 || !bytes.EqualFold(got[:7], []byte("Bearer ")) {
		return false
	}
	return subtle.ConstantTimeCompare(bytes.TrimSpace(got[7:]), []byte(token)) == 1
}

func loopback(ctx *fasthttp.RequestCtx) bool {
	ip := ctx.RemoteIP()
	return ip != nil && ip.IsLoopback()
}

// serveReload answers POST /admin/reload: 200 with the version now
// running, or 400 with why the config was refused (the old one runs on).
func (h *Handler) serveReload(ctx *fasthttp.RequestCtx) {
	res, ok := h.cfg.Reload("admin")
	if !ok {
		reply.Fail(ctx, fasthttp.StatusConflict, "invalid_request_error", "no_config_source", "This node was not started from a config source it can read again.")
		return
	}
	if !res.OK {
		reply.Fail(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "invalid_config", "Config refused, the old one keeps running: "+res.Error)
		return
	}
	reply.JSON(ctx, fasthttp.StatusOK, map[string]any{"status": "reloaded", "config_version": res.ConfigVersion, "at": res.At})
}
