package spillover

import (
	"context"
	"iter"
	"time"

	"github.com/ringgate/ringgate/router/internal/spill"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// canSpill reports whether this node can spill a tenant it owns: the
// budget needs Redis, the announcements signatures, and a second node.
func (l *Loop) canSpill() bool {
	return l.State.Load().Cfg.Limits.SpilloverRPS > 0 && l.Node.Leaser.HasStore() && l.Cluster.Clustered() &&
		!l.Cluster.Draining() && l.Node.Switchable()
}

// Run measures the tenants' rates and switches them to and from spillover
// until ctx ends.
func (l *Loop) Run(ctx context.Context) {
	tick := time.NewTicker(spill.Tick)
	defer tick.Stop()
	hot := make(spill.Heat)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		l.tick(ctx, hot)
	}
}

// tick is one tick of the spillover loop.
func (l *Loop) tick(ctx context.Context, hot spill.Heat) {
	st := l.State.Load()
	owner := l.Cluster.Owners()
	threshold := float64(st.Cfg.Limits.SpilloverRPS)
	can := l.canSpill()
	arrived := l.arrived.Take()
	for _, t := range arrived {
		t.Listed.Store(false) // its next request lists it again
	}
	for name := range hot {
		if t := st.ByName[name]; t == nil || t.Arrivals.Load() == 0 {
			delete(hot, name) // no request this tick: cooled
		}
	}
	for name, t := range l.scan(st, arrived) {
		sp := t.Spilled()
		if sp != nil && sp.Owner != l.Node.Self {
			if reason := l.Node.Lapse(sp, func() string { return owner(name) }); reason != "" {
				go l.leave(t, sp, reason)
			}
			continue
		}
		if sp != nil {
			continue // the owner's spill loop measures it
		}
		n := t.Arrivals.Swap(0)
		if !can || t.OwnedUntil.Load() != l.OwnedNow || !t.Spillable() {
			delete(hot, name)
			continue
		}
		if rate, on := hot.Measure(name, n, threshold); on {
			go l.On(ctx, name, rate)
		}
	}
}

// scan is the tenants a tick looks at. Only tenants that had requests can
// turn hot, and only those with a spill need watching: a node configured
// with 100 000 tenants does not look at each one four times a second.
func (l *Loop) scan(st *tenant.State, arrived []*tenant.Tenant) iter.Seq2[string, *tenant.Tenant] {
	return func(yield func(string, *tenant.Tenant) bool) {
		if l.Node.Spills.Load() > 0 {
			for name, t := range st.ByName {
				if !yield(name, t) {
					return
				}
			}
			return
		}
		for _, t := range arrived {
			if st.ByName[t.Name] == t && !yield(t.Name, t) {
				return
			}
		}
	}
}

// On switches a tenant this node owns to spillover.
func (l *Loop) On(ctx context.Context, name string, rate float64) {
	l.Reloads.Lock()
	t := l.State.Load().ByName[name]
	if t == nil || t.Spilled() != nil {
		l.Reloads.Unlock()
		return
	}
	sp := l.Node.Own(t.Name, t.Limits)
	t.Core().Spill.Store(sp)
	sp.WatchLine()
	l.Reloads.Unlock()

	if !l.Node.Start(sp, l.tenantOf(t), rate) {
		return
	}
	l.runOwner(ctx, name, sp)
}

// runOwner renews the owner's announcement every tick, sums the cluster's
// arrivals, and ends the spill when the tenant cools, Redis stops
// answering, or this node stops owning it.
func (l *Loop) runOwner(ctx context.Context, name string, sp *spill.Spill) {
	var cool spill.Cooling
	tick := time.NewTicker(spill.Tick)
	defer tick.Stop()
	for {
		st := l.State.Load()
		t := st.ByName[name]
		if t == nil || t.Spilled() != sp || sp.Ending() {
			return // ended elsewhere (a handover), or the tenant is gone
		}
		if ctx.Err() != nil {
			// Stopped without a drain (a crash, to the cluster): the
			// members' spill lapses by itself.
			return
		}
		reason := l.ownerEnds(st, t, sp)
		if reason == "" {
			arrivals := t.Arrivals.Swap(0) + l.Node.Announce(l.tenantOf(t), sp, true, spill.CallTimeout)
			if cool.Cooled(arrivals, st.Cfg.Limits.SpilloverRPS) {
				reason = "cooled"
			}
		}
		if reason != "" {
			l.Off(name, sp, reason)
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

// ownerEnds is why the owner ends t's spill sp now, its rate aside; "" if
// it goes on.
func (l *Loop) ownerEnds(st *tenant.State, t *tenant.Tenant, sp *spill.Spill) string {
	switch {
	case l.Cluster.Draining():
		return "drain"
	case st.Cfg.Limits.SpilloverRPS <= 0 || !t.Spillable():
		return "disabled"
	case t.OwnedUntil.Load() != l.OwnedNow:
		return "owner_changed"
	case sp.Budget.Degraded():
		return "store_unreachable"
	}
	return ""
}
