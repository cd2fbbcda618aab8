// Package node wires one ringgate process together: configuration, the
// router, the HTTP server and (in a cluster) gossip and the ring; it owns
// start-up order and the drain on shutdown. It holds no policy of its own:
// limits live in limiter and reserve, routing in router.
package node

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/reserve"
	"github.com/ringgate/ringgate/router"
)

// Options are what Start needs beyond the configuration.
type Options struct {
	Logger    *slog.Logger
	Tokenizer *reserve.Tokenizer // shared by nodes in one process; nil loads one
	Clock     func() int64
	// Listener, if set, is used instead of listening on cfg.Node.Listen.
	Listener net.Listener
}

// Node is a running ringgate node.
type Node struct {
	cfg    *config.Config
	log    *slog.Logger
	router *router.Router
	server *fasthttp.Server
	ln     net.Listener
	served chan error
}

// Start builds and starts a node; it serves until Drain or Close.
func Start(cfg *config.Config, o Options) (*Node, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	log := o.Logger.With("node", cfg.Node.Name)
	rt, err := router.New(router.Options{Config: cfg, Tokenizer: o.Tokenizer, Clock: o.Clock, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("start node %s: %w", cfg.Node.Name, err)
	}
	ln := o.Listener
	if ln == nil {
		ln, err = net.Listen("tcp", cfg.Node.Listen)
		if err != nil {
			return nil, fmt.Errorf("start node %s: listen %s: %w", cfg.Node.Name, cfg.Node.Listen, err)
		}
	}
	n := &Node{cfg: cfg, log: log, router: rt, server: rt.Server(), ln: ln, served: make(chan error, 1)}
	go func() { n.served <- n.server.Serve(ln) }()
	log.Info("start", "listen", ln.Addr().String(), "tenants", len(cfg.Tenants), "upstreams", len(cfg.Upstreams))
	return n, nil
}

// Addr is the HTTP address the node serves on.
func (n *Node) Addr() string { return n.ln.Addr().String() }

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Node.Name }

// Router exposes the node's router (tests and the demo read usage from it).
func (n *Node) Router() *router.Router { return n.router }

// Reload applies a new configuration's tenants, limits and upstreams.
func (n *Node) Reload(cfg *config.Config) error { return n.router.Reload(cfg) }

// Drain stops taking new work gracefully: readiness turns 503, requests and
// streams in flight finish (at most the drain timeout), then the server
// stops. It reports whether everything in flight finished.
func (n *Node) Drain() bool {
	timeout := n.cfg.Node.DrainTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	clean := n.router.Drain(timeout)
	n.shutdown()
	n.log.Info("drain", "phase", "done", "clean", clean)
	return clean
}

// Close stops the node at once, cutting what is in flight.
func (n *Node) Close() error {
	err := n.ln.Close()
	n.shutdown()
	return err
}

func (n *Node) shutdown() {
	done := make(chan struct{})
	go func() {
		_ = n.server.Shutdown()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		n.log.Warn("drain", "phase", "shutdown_timeout")
	}
	select {
	case err := <-n.served:
		if err != nil && !errors.Is(err, net.ErrClosed) {
			n.log.Warn("http", "error", err.Error())
		}
	default:
	}
}
