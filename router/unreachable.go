package router

import (
	"slices"
	"sync"
	"time"
)

// An edge that cannot reach a tenant's owner admits on its fallback share
// (limit / live members), and its reports of those admissions cannot reach
// the owner either. A dead owner is soon out of the ring; one that is alive
// (an asymmetric partition: a firewall between the HTTP ports, a wrong
// advertised address) goes on admitting its own clients up to the whole
// limit. So the edge says, in its gossip metadata, which owners it admits
// shares for, and an owner that k live members name keeps its own
// admissions to what their k shares (limit / live, rounded down) leave of
// each limit (admitOn): together they stay within it. An owner stays named while the edge fell back on it
// within the last second, or holds reports for it not yet delivered (what
// the share admitted must be counted somewhere: by the owner's cut until
// the owner has it), a window at most, and not once it left the view (the
// reports go to the tenants' new owners). A blip of an owner slow to
// accept so costs it its part for a second or two, not a window.

// unreachables tracks the owners this node fell back on lately.
type unreachables struct {
	mu   sync.Mutex
	last map[string]int64 // owner → when this node last fell back on it (ns)
	// tenants fell back on each owner, until their reports were delivered.
	tenants map[string]map[*tenant]struct{}
	told    []string // what the hook was last given
	// tellMu orders the loops' reads of last and calls of the hook: a
	// loop ending and the next one starting never publish out of order.
	tellMu  sync.Mutex
	running bool // the loop is on
	kick    chan struct{}
	hook    func([]string)
}

// unreachableTick is how often the loop looks for owners to stop naming;
// fallbackNamedFor how long an owner stays named after the last fallback
// on it with nothing left to report.
const (
	unreachableTick  = 250 * time.Millisecond
	fallbackNamedFor = time.Second
)

// SetCannotReachHook gives the router the node's way to say which owners
// it cannot reach (gossip metadata); called one call at a time, with the
// sorted names, whenever they change.
func (r *Router) SetCannotReachHook(f func(owners []string)) {
	r.unreach.mu.Lock()
	r.unreach.hook = f
	r.unreach.mu.Unlock()
}

// noteFallback records that this node fell back on owner now, for t.
func (r *Router) noteFallback(t *tenant, owner string) {
	now := r.clock()
	u := &r.unreach
	u.mu.Lock()
	if u.last == nil {
		u.last = make(map[string]int64)
		u.tenants = make(map[string]map[*tenant]struct{})
		u.kick = make(chan struct{}, 1)
	}
	_, had := u.last[owner]
	u.last[owner] = now
	if u.tenants[owner] == nil {
		u.tenants[owner] = make(map[*tenant]struct{})
	}
	u.tenants[owner][t] = struct{}{}
	start := !u.running
	u.running = true
	u.mu.Unlock()
	if start {
		go r.unreachableLoop()
	} else if !had {
		select { // a new owner is named at once
		case u.kick <- struct{}{}:
		default:
		}
	}
}

// unreachableLoop tells the hook which owners to name, as they change,
// until none is left.
func (r *Router) unreachableLoop() {
	t := time.NewTicker(unreachableTick)
	defer t.Stop()
	u := &r.unreach
	for {
		window := int64(r.state.Load().cfg.Limits.Window)
		now := r.clock()
		v := r.view.Load()
		u.tellMu.Lock()
		u.mu.Lock()
		names := make([]string, 0, len(u.last))
		for owner, at := range u.last {
			keep := now-at <= int64(fallbackNamedFor)
			for t := range u.tenants[owner] {
				if t.undelivered() {
					keep = true
				} else {
					delete(u.tenants[owner], t)
				}
			}
			if !keep || now-at > window || v != nil && v.addrs[owner] == "" {
				delete(u.last, owner)
				delete(u.tenants, owner)
				continue
			}
			names = append(names, owner)
		}
		slices.Sort(names)
		changed := !slices.Equal(names, u.told)
		hook := u.hook
		if changed {
			u.told = names
		}
		if len(names) == 0 {
			u.running = false
		}
		u.mu.Unlock()
		if changed && hook != nil {
			hook(names)
		}
		u.tellMu.Unlock()
		if len(names) == 0 {
			return
		}
		select {
		case <-t.C:
		case <-u.kick:
		}
	}
}

// undelivered reports whether t's fallback share admitted calls its owner
// has not been told of yet.
func (t *tenant) undelivered() bool {
	c := t.peek()
	if c == nil {
		return false
	}
	c.fb.mu.Lock()
	defer c.fb.mu.Unlock()
	return len(c.fb.pending) > 0
}
