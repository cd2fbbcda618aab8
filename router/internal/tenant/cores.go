package tenant

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/router/internal/away"
	"github.com/ringgate/ringgate/router/internal/spill"
)

// Cores makes tenants' cores on the config in force. A reload installs its
// limits and window under mu (Install), and a core is made under mu: one
// made during a reload counts on the reload's config, or is given it.
type Cores struct {
	mu              sync.Mutex
	state           *atomic.Pointer[State] // the router's, in force
	window, slotTTL time.Duration
	hooks           Hooks
	clock           func() int64
	clk             clockwork.Clock // the lines' waits
	// removed keeps, for a window and a slot TTL, the core of an entity a
	// reload removed: put back by a later reload, it goes on with its
	// usage and its running calls' slots, not from nothing (a tenant
	// removed by mistake and restored would have had its limits twice).
	removed map[string]removedRef
}

// NewCores makes cores on the state that st holds (the router's, in force;
// Install sets it), telling hooks; clock is the windows' clock in Unix ns,
// clk the lines' waits.
func NewCores(st *atomic.Pointer[State], hooks Hooks, clock func() int64, clk clockwork.Clock) *Cores {
	return &Cores{state: st, hooks: hooks, clock: clock, clk: clk}
}

type removedRef struct {
	ref *coreRef
	at  int64 // when the reload removed it
}

// reclaim is the core of name that a reload removed lately, or nil.
func (cs *Cores) reclaim(name string) *coreRef {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if r, ok := cs.removed[name]; ok {
		return r.ref
	}
	return nil
}

// make makes t's core, unless another did first.
func (cs *Cores) make(t *Tenant) *Core {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if c := t.ref.Load(); c != nil {
		return c
	}
	limits := t.Limits
	if st := cs.state.Load(); st != nil {
		if ct := st.ByName[t.Name]; ct != nil && ct.ref == t.ref {
			limits = ct.Limits // t is a struct a reload replaced
		}
	}
	c := &Core{
		Lim:     limiter.NewTenant(limits, cs.window, cs.slotTTL),
		Fb:      away.NewLedger(cs.window, cs.slotTTL),
		Spill:   spill.NewHolder(cs.hooks.Spills),
		Queue:   &queue.Queue{Clock: cs.clk},
		FbQueue: &queue.Queue{Clock: cs.clk},
	}
	if to := t.ref.frozenTo.Load(); to != nil {
		c.Lim.Freeze(cs.clock(), *to)
	}
	if f, name := cs.hooks.Changed, t.Name; f != nil {
		c.Lim.OnChange(func() { f(name) })
	}
	t.ref.Store(c)
	return c
}

// Thaw is limiter.Tenant.Thaw for t, without making its core.
func (cs *Cores) Thaw(t *Tenant) {
	if c := t.Peek(); c != nil {
		c.Lim.Thaw()
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if c := t.Peek(); c != nil {
		c.Lim.Thaw()
		return
	}
	t.ref.frozenTo.Store(nil)
}

// Freeze is limiter.Tenant.Freeze for t, without making its core if it
// has none: what it hands over is then an empty state, and where it went
// is kept in its coreRef until the core is made.
func (cs *Cores) Freeze(t *Tenant, now int64, to string) limiter.State {
	if c := t.Peek(); c != nil {
		return c.Lim.Freeze(now, to)
	}
	cs.mu.Lock()
	if c := t.Peek(); c != nil {
		cs.mu.Unlock()
		return c.Lim.Freeze(now, to)
	}
	t.ref.frozenTo.Store(&to)
	window, slotTTL := cs.window, cs.slotTTL
	cs.mu.Unlock()
	// An empty state as a core's Freeze exports it (bucket widths, head).
	return limiter.NewTenant(t.Limits, window, slotTTL).Freeze(now, to)
}

// Install puts st in force: the cores made already take its limits (and
// window, rebucketed at now), those made from now on are made on it.
func (cs *Cores) Install(st *State, now int64) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	lim := st.Cfg.Limits
	rewindow := cs.window != lim.Window || cs.slotTTL != lim.SlotTTL
	cs.window, cs.slotTTL = lim.Window, lim.SlotTTL
	cs.keepRemoved(st, now, rewindow)
	for _, t := range st.ByName {
		c := t.Peek()
		if c == nil {
			continue
		}
		c.Lim.SetLimits(t.Limits)
		share := c.Fb.SetWindow(lim.Window, lim.SlotTTL)
		if rewindow {
			c.Lim.Rebucket(now, lim.Window, lim.SlotTTL)
			if share != nil {
				share.Rebucket(now, lim.Window, lim.SlotTTL)
			}
		}
	}
	cs.state.Store(st)
}

// keepRemoved notes the entities the state in force has and st has not,
// forgets those st has again and those removed over a window and a slot
// TTL ago (or all of them when the window changes: their buckets would be
// of the old width); cs.mu is held.
func (cs *Cores) keepRemoved(st *State, now int64, rewindow bool) {
	if rewindow {
		cs.removed = nil
	}
	for name, r := range cs.removed {
		if st.ByName[name] != nil || now-r.at > int64(cs.window+cs.slotTTL) {
			delete(cs.removed, name)
		}
	}
	prev := cs.state.Load()
	if prev == nil || rewindow {
		return
	}
	for name, t := range prev.ByName {
		if st.ByName[name] == nil && t.Peek() != nil {
			if cs.removed == nil {
				cs.removed = make(map[string]removedRef)
			}
			cs.removed[name] = removedRef{ref: t.ref, at: now}
		}
	}
}
