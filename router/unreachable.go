package router

import (
	"time"

	"github.com/ringgate/ringgate/router/internal/tenant"
)

// SetCannotReachHook gives the router the node's way to say which owners
// it cannot reach (gossip metadata); called one call at a time, with the
// sorted names, whenever they change (away.Unreachables).
func (r *Router) SetCannotReachHook(f func(owners []string)) {
	r.unreach.SetHook(f)
}

// noteFallback records that this node fell back on owner now, for t.
func (r *Router) noteFallback(t *tenant.Tenant, owner string) {
	r.unreach.Note(owner, t.Core().Fb, (*awayNode)(r))
}

// awayNode is what away.Unreachables reads of the node.
type awayNode Router

func (n *awayNode) Now() int64 { return (*Router)(n).clock() }

func (n *awayNode) Window() time.Duration { return (*Router)(n).state.Load().Cfg.Limits.Window }

// Left reports whether owner has left the view.
func (n *awayNode) Left(owner string) bool {
	v := (*Router)(n).view.Load()
	return v != nil && v.Addrs()[owner] == ""
}
