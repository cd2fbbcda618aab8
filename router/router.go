package router

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/reserve"
	"github.com/ringgate/ringgate/router/internal/cluster"
	"github.com/ringgate/ringgate/router/internal/deltaid"
	"github.com/ringgate/ringgate/router/internal/drain"
	"github.com/ringgate/ringgate/router/internal/fallback"
	"github.com/ringgate/ringgate/router/internal/hop"
	"github.com/ringgate/ringgate/router/internal/hopsign"
	"github.com/ringgate/ringgate/router/internal/metrics"
	"github.com/ringgate/ringgate/router/internal/models"
	"github.com/ringgate/ringgate/router/internal/moves"
	"github.com/ringgate/ringgate/router/internal/provider"
	"github.com/ringgate/ringgate/router/internal/reply"
	"github.com/ringgate/ringgate/router/internal/reqlog"
	"github.com/ringgate/ringgate/router/internal/spill"
	"github.com/ringgate/ringgate/router/internal/spillover"
	"github.com/ringgate/ringgate/router/internal/tenant"
	"github.com/ringgate/ringgate/router/internal/usage"
	"github.com/ringgate/ringgate/router/internal/wake"
	"github.com/ringgate/ringgate/upstream"
)

// Options configure a Router.
type Options struct {
	Config *config.Config
	// Tokenizer counts prompt tokens; nil loads the embedded one.
	Tokenizer *reserve.Tokenizer
	// Clock is the node's one clock: its windows, its deadlines and its
	// waits. nil is the wall clock; tests inject a fake one.
	Clock  clockwork.Clock
	Logger *slog.Logger
	// Leaser keeps the node's part of the providers' limits; nil: one
	// without a store (every budget on this node's strict share).
	Leaser *lease.Leaser
	// OnAdmit, if set, is told of every admission this node decides (the
	// tenant, when by Clock, the x-request-id valid during the call only),
	// for an auditor of decisions rather than arrivals. It must not block.
	OnAdmit func(tenant string, at int64, requestID []byte)
	// Dial, if set, connects to a peer within timeout instead of TCP: a
	// test's in-memory network (package hop's Inmem).
	Dial func(addr string, timeout time.Duration) (net.Conn, error)
}

// Router serves one node's HTTP: the client API and the admin endpoints.
type Router struct {
	node string
	// tell tells of the requests: their ids, the node's name on answers,
	// the refused and access lines (package reqlog).
	tell *reqlog.Node
	clk  clockwork.Clock // the node's one clock (clock reads it)
	life lifecycle
	// clientWriteIdle: reply.WriteIdle, shorter in tests.
	clientWriteIdle time.Duration
	log             *slog.Logger
	tokens          *usage.Tokens
	metrics         *metrics.Metrics
	adminServe      adminServe
	onAdmit         func(tenant string, at int64, requestID []byte)

	state   atomic.Pointer[tenant.State]
	cores   *tenant.Cores // makes the tenants' cores on the config in force
	reloads reloading
	view    cluster.Views
	hops    *hopsign.Signer
	peers   *hop.Pool
	ids     *deltaid.IDs // names this node's deltas, skips ones applied twice
	// watches are the calls waiting for their upstream: their clients'
	// connections, and the hops among them (hangup.go).
	watches hangups
	moving  tenantMoves
	moves   *moves.Node // this node's part in package handoff, and the deltas it delivers
	leaser  *lease.Leaser
	lines   *provider.Lines
	// spills run spillover on the tenants (package spillover).
	spills spillover.Loop
	// fb: the tenants' fallback episodes, while their owner cannot be
	// reached (package fallback).
	fb *fallback.Edge
	// clustered: the node gossips; until it holds a ring it owns nothing.
	clustered bool
}

// lifecycle is where the node is in its life: started, ready, draining,
// woken from a pause, closed.
type lifecycle struct {
	// quit is closed by Close: background work that outlives requests
	// (reports retried to an owner out of reach) ends with it.
	quit      chan struct{}
	closeOnce sync.Once
	ready     atomic.Bool
	wake      wake.Guard   // pause watchdog (package wake)
	drain     *drain.Drain // the calls being served, and the drain
	started   time.Time
}

// reloading applies the config again: mu orders reloads; reloader reads
// and applies the file (SetReloader); last is its last outcome, for
// /cluster.
type reloading struct {
	mu       sync.Mutex
	reloader atomic.Pointer[func(trigger string) ReloadResult]
	last     atomic.Pointer[ReloadResult]
}

// tenantMoves is what moves tenants' state between nodes needs here
// beside package moves: the members gone (cluster.go).
type tenantMoves struct {
	// departed are the members that left this node's view (and have not
	// come back): a report from one frees its slots.
	departed cluster.Departed
}

// New builds a router from a validated configuration.
func New(o Options) (*Router, error) {
	if o.Config == nil {
		return nil, errors.New("router: no config")
	}
	// A hang-up list left on the wall clock times a call with one read.
	hangupClock := o.Clock
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Tokenizer == nil {
		tok, err := reserve.NewTokenizer()
		if err != nil {
			return nil, fmt.Errorf("load tokenizer: %w", err)
		}
		o.Tokenizer = tok
	}
	r := &Router{
		life:            lifecycle{quit: make(chan struct{}), drain: drain.New(o.Clock, o.Logger), started: time.Now()},
		clientWriteIdle: reply.WriteIdle,
		node:            o.Config.Node.Name,
		clk:             o.Clock,
		log:             o.Logger,
		tokens:          usage.New(o.Tokenizer, o.Config.Limits.DefaultCompletion),
		metrics:         metrics.New(),
		ids:             deltaid.New(),
		leaser:          o.Leaser,
		onAdmit:         o.OnAdmit,
		// A cluster node owns nothing until it has joined and holds a
		// ring; a standalone one owns everything.
		clustered: o.Config.Node.Gossip != "",
	}
	r.tell = reqlog.New(r.node, o.Logger, r.clock, o.Config.Node.AccessLog)
	r.watches.callGone = func(c any) { r.callGone(c.(*call)) }
	r.watches.list.Clock = hangupClock
	r.view.Clock = o.Clock
	if r.leaser == nil {
		r.leaser = lease.NewLeaser(lease.LeaserConfig{Node: r.node, Clock: r.clock, Logger: o.Logger})
	}
	r.lines = provider.New(provider.Config{Leaser: r.leaser, Clock: o.Clock, Log: o.Logger,
		Members: func() int { return r.view.Load().LiveMembers() },
		Keep: func(keep map[string]bool) {
			if st := r.state.Load(); st != nil {
				st.SpillKeys(keep)
			}
		}})
	r.initSpillover()
	r.cores = tenant.NewCores(&r.state, r.stateHooks(), r.clock, o.Clock)
	r.moves = r.newMoves()
	r.fb = r.newFallback()
	st, err := tenant.Build(o.Config, nil, r.metrics, r.cores)
	if err != nil {
		return nil, err
	}
	st.Budgets = r.lines.Build(o.Config, st.Providers)
	r.cores.Install(st, 0)
	r.metrics.Reg.MustRegister(r.lines.Collector(), tenant.QueueCollector(r.state.Load), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ringgate_inflight_requests",
		Help: "Client requests and streams being served by this node.",
	}, func() float64 { return float64(r.life.drain.Active()) }))
	r.life.ready.Store(true)
	// One clock for the windows, the snapshots and the hop timestamps.
	r.hops = hopsign.New(o.Config.Cluster.Secret, o.Config.Cluster.HopSkew, o.Clock.Now)
	connect, first, idle := hop.Timeouts(o.Config)
	r.peers = hop.New(hop.Config{Connect: connect, First: first, Idle: idle, Dial: o.Dial, Clock: r.clock})
	return r, nil
}

// clock is the node's clock in Unix nanoseconds: what windows, tickets
// and hop stamps count in.
func (r *Router) clock() int64 { return r.clk.Now().UnixNano() }

// Close ends the router's background work: reports being retried to an
// owner out of reach are dropped (the node is going). Requests still in
// flight finish as they would.
func (r *Router) Close() {
	r.life.closeOnce.Do(func() { close(r.life.quit) })
}

// Reload swaps in a new configuration's tenants, limits and upstreams. Usage
// already counted is kept for tenants that keep their name, and calls in
// flight settle on it; a new window or slot TTL rebuckets it (tenant.Build).
func (r *Router) Reload(cfg *config.Config) error {
	r.reloads.mu.Lock()
	defer r.reloads.mu.Unlock()
	prev := r.state.Load()
	st, err := tenant.Build(cfg, prev, r.metrics, r.cores)
	if err != nil {
		return err
	}
	st.Budgets = r.lines.Build(cfg, st.Providers)
	for name, t := range st.ByName {
		if old := prev.ByName[name]; old != nil {
			// A handoff in progress holds on: the gate moves along.
			t.Gate.Store(old.Gate.Load())
		}
	}
	// The usage is kept; a new window or slot TTL rebuckets it (see
	// limiter.Tenant.Rebucket): what the cores count and the tickets of
	// calls in flight carry over to the new bucket widths.
	r.cores.Install(st, r.clock())
	r.tell.SetAccess(cfg.Node.AccessLog)
	var gone []*tenant.Tenant
	for name, t := range prev.ByName {
		if st.ByName[name] == nil {
			gone = append(gone, t)
			// Gone from the config: its spill (if any) ends with it. One
			// this node owns ends as any owner's spill does (its limiter
			// unsealed, the members told, the budget retired): the core
			// is kept, and put back if a later reload restores the tenant,
			// where a limiter left sealed would answer 503 tenant_moving
			// to every request.
			if sp := t.Spilled(); sp != nil {
				if sp.Owner == r.node {
					go r.spills.End(t, name, sp, "removed")
				} else {
					t.Peek().Spill.CompareAndSwap(sp, nil)
				}
			}
		}
	}
	r.trackOwnership(r.view.Load())
	r.spills.Reload(st)
	// New limits, budgets: the heads of every line try again now, on the
	// config in force (a request that waited is decided on it), those of
	// an entity gone too (a model limit removed: nothing else wakes its
	// line).
	tenant.KickLines(st, gone)
	r.lines.Kick()
	r.log.Info("reload", "tenants", len(cfg.Tenants), "upstreams", len(cfg.Upstreams), "config_version", r.ConfigVersion())
	return nil
}

// idleTimeout bounds the wait for the next request on a keep-alive
// connection.
const idleTimeout = 90 * time.Second

// Server returns a fasthttp server configured for this router: body cap with
// 413, no write timeout (it would cut long streams), idle keep-alive bound,
// and slow clients cut with a 408 (see bodyDeadline).
//
// fasthttp's ReadTimeout is the header timeout: it is armed when a
// connection opens and, on a keep-alive connection, again at the first byte
// of each next request (the wait for that byte is bounded by IdleTimeout
// alone), so an idle keep-alive connection is never cut by it. HeaderReceived
// then replaces it with the body's own deadline.
func (r *Router) Server() *fasthttp.Server {
	cfg := r.state.Load().Cfg
	return &fasthttp.Server{
		Handler:               r.Handler,
		Name:                  "ringgate",
		MaxRequestBodySize:    int(cfg.Limits.MaxBodyBytes),
		ReadTimeout:           cfg.Node.HeaderTimeout,
		HeaderReceived:        r.bodyDeadline,
		IdleTimeout:           idleTimeout,
		NoDefaultServerHeader: true,
		ReduceMemoryUsage:     false,
		CloseOnShutdown:       true,
		ErrorHandler:          r.serverError,
		// fasthttp quotes the request's bytes in its errors, in places the
		// logger cannot cut (reply.HTTPLogger): never, here.
		SecureErrorLogMessage: true,
		Logger:                reply.NewHTTPLogger(r.log),
	}
}

// bodyDeadline gives a request's body its read budget once its headers are
// in, after Apache mod_reqtimeout's MinRate: body_grace plus the body's
// length at body_min_rate. A body of unknown length (chunked) gets the
// budget of the largest body accepted, max_body_bytes. Read from the live
// config, so a reload applies to the next request.
func (r *Router) bodyDeadline(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	cfg := r.state.Load().Cfg
	return fasthttp.RequestConfig{
		ReadTimeout: reply.BodyBudget(int64(h.ContentLength()), cfg.Limits.MaxBodyBytes, cfg.Node.BodyMinRate, cfg.Node.BodyGrace),
	}
}

// serverError answers errors met before the handler runs
// (reply.ReadError), with the request's id.
func (r *Router) serverError(ctx *fasthttp.RequestCtx, err error) {
	r.tell.SetID(&ctx.Request.Header, &ctx.Response.Header)
	reply.ReadError(ctx, err, r.state.Load().Cfg.Limits.MaxBodyBytes)
}

// Handler is the node's single HTTP entry point.
func (r *Router) Handler(ctx *fasthttp.RequestCtx) {
	path := ctx.Path()
	if ep, ok := upstream.EndpointFor(path); ok {
		r.tell.Begin(ctx)
		if !ctx.IsPost() {
			ctx.Response.Header.Set("Allow", "POST")
			reply.Fail(ctx, fasthttp.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "Use POST.")
			return
		}
		if r.life.drain.Start() {
			// Clients must not reuse a connection to a node about to go.
			ctx.SetConnectionClose()
		}
		streaming := r.serveAPI(ctx, ep)
		if r.tell.Done(ctx, streaming); streaming {
			return // a stream finishes (and calls done) later
		}
		r.done()
		return
	}
	switch string(path) {
	case cancelPath:
		r.serveCancel(ctx)
		return
	case moves.DeltaPath:
		r.serveDelta(ctx)
		return
	case moves.HandoffPath:
		r.serveHandoff(ctx)
		return
	case spill.Path:
		r.serveSpill(ctx)
		return
	}
	if models.IsPath(string(path)) {
		r.serveModels(ctx)
		return
	}
	r.serveAdmin(ctx)
}

func (r *Router) done() { r.life.drain.Done() }

// BeginDrain marks the node as draining: /readyz answers 503 so load
// balancers stop sending new connections, and every answer closes its
// connection so clients do not reuse one to a node about to go.
func (r *Router) BeginDrain() { r.life.drain.Begin() }

// SetReady says whether the node has joined and holds a ring; /readyz
// answers 503 until then.
func (r *Router) SetReady(ready bool) { r.life.ready.Store(ready) }

// WaitIdle waits until no request or stream is in flight and at least grace
// has passed, at most timeout (drain.Drain.WaitIdle). It reports whether
// the node went idle in time.
func (r *Router) WaitIdle(grace, timeout time.Duration) bool {
	return r.life.drain.WaitIdle(grace, timeout)
}

// InFlight reports the client requests and streams being served.
func (r *Router) InFlight() int64 { return r.life.drain.Active() }
