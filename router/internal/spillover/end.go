package spillover

import (
	"sync"

	"github.com/ringgate/ringgate/router/internal/spill"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// Off ends a spill this node owns (spill.Node's End).
func (l *Loop) Off(name string, sp *spill.Spill, reason string) {
	l.End(l.State.Load().ByName[name], name, sp, reason)
}

// End is Off for tenant t, which may be one a reload has just removed:
// its core is kept a while (and put back if a later reload restores the
// tenant), so its limiter must not stay sealed with no spill behind it.
func (l *Loop) End(t *tenant.Tenant, name string, sp *spill.Spill, reason string) {
	var st *spill.Tenant
	if t != nil {
		st = l.tenantOf(t)
		st.Name = name
	}
	l.Node.End(st, sp, reason)
}

// EndMovedBy ends the spills this node owns of tenants a view gives
// another owner (owner, its owner of a tenant), before that view is in
// force.
func (l *Loop) EndMovedBy(owner func(tenant string) string) {
	var names []string
	for name, t := range l.State.Load().ByName {
		if sp := t.Spilled(); sp != nil && sp.Owner == l.Node.Self {
			if o := owner(name); o != "" && o != l.Node.Self {
				names = append(names, name)
			}
		}
	}
	l.EndOwned(names)
}

// EndOwned ends the spills this node owns of the tenants named, all at
// once.
func (l *Loop) EndOwned(names []string) {
	if l.Node.Owned() == 0 {
		return
	}
	var wg sync.WaitGroup
	for _, name := range names {
		if t := l.State.Load().ByName[name]; t == nil || t.Spilled() == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.endOwned(name)
		}()
	}
	wg.Wait()
}

// endOwned ends, before its state is handed over, a spill of a tenant this
// node owns (a handoff asks for it).
func (l *Loop) endOwned(name string) {
	t := l.State.Load().ByName[name]
	if t == nil {
		return
	}
	sp := t.Spilled()
	if sp == nil || sp.Owner != l.Node.Self {
		return
	}
	if t.OwnerSpill(l.Node.Self) != sp {
		return // failed to start
	}
	// The owner's loop sees the spill gone and stops.
	l.Off(name, sp, "handover")
}
