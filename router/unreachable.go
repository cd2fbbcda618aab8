package router

import "time"

// SetCannotReachHook gives the router the node's way to say which owners
// it cannot reach (gossip metadata); called one call at a time, with the
// sorted names, whenever they change (away.Unreachables).
func (r *Router) SetCannotReachHook(f func(owners []string)) {
	r.unreach.SetHook(f)
}

// noteFallback records that this node fell back on owner now, for t.
func (r *Router) noteFallback(t *tenant, owner string) {
	r.unreach.Note(owner, t.c().fb, (*awayNode)(r))
}

// awayNode is what away.Unreachables reads of the node.
type awayNode Router

func (n *awayNode) Now() int64 { return (*Router)(n).clock() }

func (n *awayNode) Window() time.Duration { return (*Router)(n).state.Load().cfg.Limits.Window }

// Left reports whether owner has left the view.
func (n *awayNode) Left(owner string) bool {
	v := (*Router)(n).view.Load()
	return v != nil && v.addrs[owner] == ""
}
