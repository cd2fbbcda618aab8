package router

import (
	"time"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/fallback"
)

// A tenant's fallback episodes, while its owner cannot be reached, are
// package fallback's (r.fb); here is their wiring to the node.

// newFallback wires package fallback to the router.
func (r *Router) newFallback() *fallback.Edge {
	return fallback.New(fallback.Config{Self: r.node, Clock: r.clock, View: r.view.Load, IDs: r.ids,
		Moves: r.moves, Metrics: r.metrics, Log: r.log,
		Window: func() time.Duration { return r.state.Load().Cfg.Limits.Window }})
}

// SetFallbackSeed gives the router a source of a tenant's last known state
// (the node's snapshot store) for seeding fallback shares.
func (r *Router) SetFallbackSeed(seed func(tenant string) (limiter.State, bool)) {
	r.fb.SetSeed(seed)
}

// SetCannotReachHook gives the router the node's way to say which owners
// it cannot reach (gossip metadata); called one call at a time, with the
// sorted names, whenever they change (away.Unreachables).
func (r *Router) SetCannotReachHook(f func(owners []string)) {
	r.fb.SetCannotReachHook(f)
}
