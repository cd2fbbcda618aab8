package router

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/reserve"
	"github.com/ringgate/ringgate/upstream"
)

// Options configure a Router.
type Options struct {
	Config *config.Config
	// Tokenizer counts prompt tokens; nil loads the embedded one.
	Tokenizer *reserve.Tokenizer
	// Clock returns wall-clock Unix nanoseconds; nil is time.Now. Tests
	// inject their own.
	Clock  func() int64
	Logger *slog.Logger
}

// Router serves one node's HTTP: the client API and the admin endpoints.
type Router struct {
	node    string
	clock   func() int64
	log     *slog.Logger
	tok     *reserve.Tokenizer
	est     *reserve.Estimator
	metrics *metrics

	state    atomic.Pointer[state]
	reloadMu sync.Mutex

	draining atomic.Bool
	active   atomic.Int64 // client requests and streams being served
	started  time.Time

	metricsOnce sync.Once
	metricsHTTP fasthttp.RequestHandler
}

// New builds a router from a validated configuration.
func New(o Options) (*Router, error) {
	if o.Config == nil {
		return nil, errors.New("router: no config")
	}
	if o.Clock == nil {
		o.Clock = func() int64 { return time.Now().UnixNano() }
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
		node:    o.Config.Node.Name,
		clock:   o.Clock,
		log:     o.Logger,
		tok:     o.Tokenizer,
		est:     reserve.NewEstimator(o.Config.Limits.DefaultCompletion),
		metrics: newMetrics(),
		started: time.Now(),
	}
	st, err := buildState(o.Config, nil, r.metrics)
	if err != nil {
		return nil, err
	}
	r.state.Store(st)
	return r, nil
}

// Reload swaps in a new configuration's tenants, limits and upstreams. Usage
// already counted is kept for tenants that keep their name (unless the window
// or slot TTL changed, which gives them fresh windows).
func (r *Router) Reload(cfg *config.Config) error {
	r.reloadMu.Lock()
	defer r.reloadMu.Unlock()
	st, err := buildState(cfg, r.state.Load(), r.metrics)
	if err != nil {
		return err
	}
	r.state.Store(st)
	r.log.Info("reload", "tenants", len(cfg.Tenants), "upstreams", len(cfg.Upstreams))
	return nil
}

// Server returns a fasthttp server configured for this router: body cap with
// 413, no write timeout (it would cut long streams), idle keep-alive bound.
func (r *Router) Server() *fasthttp.Server {
	cfg := r.state.Load().cfg
	return &fasthttp.Server{
		Handler:               r.Handler,
		Name:                  "ringgate",
		MaxRequestBodySize:    int(cfg.Limits.MaxBodyBytes),
		ReadTimeout:           30 * time.Second,
		IdleTimeout:           90 * time.Second,
		NoDefaultServerHeader: true,
		ReduceMemoryUsage:     false,
		CloseOnShutdown:       true,
		ErrorHandler:          r.serverError,
		Logger:                fasthttpLogger{r.log},
	}
}

// serverError answers errors met before the handler runs.
func (r *Router) serverError(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		fail(ctx, fasthttp.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
			fmt.Sprintf("Request body too large: the limit is %d bytes.", r.state.Load().cfg.Limits.MaxBodyBytes))
		return
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		fail(ctx, fasthttp.StatusRequestTimeout, "invalid_request_error", "request_timeout", "Request read timed out.")
		return
	}
	fail(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "bad_request", "Malformed HTTP request.")
}

// Handler is the node's single HTTP entry point.
func (r *Router) Handler(ctx *fasthttp.RequestCtx) {
	path := ctx.Path()
	if ep, ok := upstream.EndpointFor(path); ok {
		if !ctx.IsPost() {
			ctx.Response.Header.Set("Allow", "POST")
			fail(ctx, fasthttp.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "Use POST.")
			return
		}
		r.active.Add(1)
		r.metrics.inflight.Inc()
		if r.serveAPI(ctx, ep) {
			return // a stream finishes (and calls done) later
		}
		r.done()
		return
	}
	r.serveAdmin(ctx)
}

func (r *Router) done() {
	r.metrics.inflight.Dec()
	r.active.Add(-1)
}

// Drain marks the node as draining (readyz answers 503) and waits for the
// requests and streams in flight to finish, at most timeout. It reports
// whether everything finished.
func (r *Router) Drain(timeout time.Duration) bool {
	r.draining.Store(true)
	r.log.Info("drain", "phase", "start", "timeout", timeout.String())
	deadline := time.Now().Add(timeout)
	for r.active.Load() > 0 {
		if time.Now().After(deadline) {
			r.log.Warn("drain", "phase", "timeout", "in_flight", r.active.Load())
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.log.Info("drain", "phase", "idle")
	return true
}

// fasthttpLogger routes fasthttp's own messages into slog.
type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	f.l.Warn("http", "detail", fmt.Sprintf(format, args...))
}
