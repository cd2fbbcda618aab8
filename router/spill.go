package router

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/spill"
	"github.com/ringgate/ringgate/router/internal/status"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// Hot-tenant spillover is package spill's; here is what of it reads the
// router's tenants, calls, view and state: which tenants are measured, the
// owner's loop and its reasons to end a spill, the announcements' HTTP
// side.

// spillEndWait bounds how long a request on the owner waits for a spill
// that is ending to end (its members told, its window fenced, its ledger
// reported: each bounded), to be decided on the unsealed limiter rather
// than refused with a 503.
const spillEndWait = spill.CallTimeout + spill.FenceWait + deltaTimeout + 150*time.Millisecond

// initSpillover gives package spill what it needs of the router.
func (r *Router) initSpillover() {
	n := &r.spillover
	n.Self, n.Clock, n.Leaser, n.Log = r.node, r.clk, r.leaser, r.log
	n.Live = func() int { return r.view.Load().liveMembers() }
	n.Limits = func() config.Limits { return r.state.Load().Cfg.Limits }
	n.Peers = r.spillPeers
	n.Phase = func(phase string) { r.metrics.Spillover.WithLabelValues(phase).Inc() }
	n.EndWait = spillEndWait
}

// spillPeers is the view in force as an announcement needs it.
func (r *Router) spillPeers() *spill.View {
	v := r.view.Load()
	if v == nil {
		return nil
	}
	others := make(map[string]string)
	for _, m := range v.members {
		if m.Name != r.node && m.Addr != "" {
			others[m.Name] = m.Addr
		}
	}
	return &spill.View{Others: others, Addrs: v.addrs,
		Call: func(node, addr string, msg spill.Msg, timeout time.Duration) (int, []byte, error) {
			return r.peerCall(v, addr, node, spill.Path, msg, 1, timeout)
		}}
}

// spillTenant is t's parts as package spill needs them.
func (r *Router) spillTenant(t *tenant.Tenant) *spill.Tenant {
	c := t.Core()
	return &spill.Tenant{Name: t.Name, Limits: t.Limits, Lim: c.Lim, Holder: c.Spill, Queue: c.Queue,
		Ledger: spillLedger{r: r, t: t}}
}

// spillLedger is t's fallback ledger (fallback.go) as a spill reports it.
type spillLedger struct {
	r *Router
	t *tenant.Tenant
}

func (l spillLedger) Report() bool {
	l.r.reportFallback(l.t)
	return l.t.Core().Fb.Delivered()
}

func (l spillLedger) Share() *limiter.Tenant { return l.t.Core().Fb.Share() }

func (l spillLedger) Send(d limiter.Delta) {
	l.r.sendDeltas(l.t, "", []limiter.Delta{l.r.ids.Name(d)}, 0)
}

// abandonSpill leaves the tenant's spill of owner when a request this node
// forwarded to owner failed: it got here because the spill's budget
// stalled (Redis did not answer this node), and the owner does not answer
// either. The request goes to the fallback share; back on the budget once
// Redis answers, this node would admit on a window that knows nothing of
// what its share admitted. (An owner that is alive after all announces the
// spill again: this node rejoins once its share's admissions reached it,
// which charges them to the budget.)
func (r *Router) abandonSpill(t *tenant.Tenant, owner string) {
	c := t.Peek()
	if c == nil {
		return // no core: no spill
	}
	if sp := c.Spill.Load(); r.spillover.Abandon(sp, owner, c.Spill) {
		go r.leaveSpill(t, sp, "owner_unreachable")
	}
}

// leaveSpill stops serving a spill this node does not own (spill.Node's
// Leave).
func (r *Router) leaveSpill(t *tenant.Tenant, sp *spill.Spill, reason string) bool {
	return r.spillover.Leave(r.spillTenant(t), sp, reason)
}

// reloadSpills gives the spills this node owns the tenants' new limits (a
// reload); the members take them with the next announcement.
func (r *Router) reloadSpills(st *tenant.State) {
	for _, t := range st.ByName {
		if sp := t.Spilled(); sp != nil && sp.Owner == r.node {
			sp.Budget.SetLimits(t.Limits, lease.Share)
		}
	}
}

// canSpill reports whether this node can spill a tenant it owns: the
// budget needs Redis, the announcements signatures, and a second node.
func (r *Router) canSpill() bool {
	v := r.view.Load()
	return r.state.Load().Cfg.Limits.SpilloverRPS > 0 && r.leaser.HasStore() && r.hops.Enabled() &&
		r.clustered && !r.life.draining.Load() && v != nil && len(v.members) > 1 && r.spillover.Switchable()
}

// edgeSpill is the spill this node serves the tenant on instead of
// forwarding to owner; nil when there is none, or while Redis does not
// answer this node (spill.Node's Usable).
func (r *Router) edgeSpill(t *tenant.Tenant, owner string) *spill.Spill {
	sp := t.Spilled()
	if !r.spillover.Usable(sp, owner) {
		return nil
	}
	if !t.Spillable() {
		return nil // given a team or model limits since (a reload): its owner decides them
	}
	sp.Arrive()
	return sp
}

// RunSpillover measures the tenants' rates and switches them to and from
// spillover until ctx ends.
func (r *Router) RunSpillover(ctx context.Context) {
	tick := time.NewTicker(spill.Tick)
	defer tick.Stop()
	hot := make(spill.Heat)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r.spillTick(ctx, hot)
	}
}

// spillTick is one tick of the spillover loop.
func (r *Router) spillTick(ctx context.Context, hot spill.Heat) {
	st := r.state.Load()
	v := r.view.Load()
	threshold := float64(st.Cfg.Limits.SpilloverRPS)
	can := r.canSpill()
	arrived := r.arrived.Take()
	for _, t := range arrived {
		t.Listed.Store(false) // its next request lists it again
	}
	for name := range hot {
		if t := st.ByName[name]; t == nil || t.Arrivals.Load() == 0 {
			delete(hot, name) // no request this tick: cooled
		}
	}
	for name, t := range r.spillScan(st, arrived) {
		sp := t.Spilled()
		if sp != nil && sp.Owner != r.node {
			if reason := r.spillover.Lapse(sp, func() string { return v.owner(name) }); reason != "" {
				go r.leaveSpill(t, sp, reason)
			}
			continue
		}
		if sp != nil {
			continue // the owner's spill loop measures it
		}
		n := t.Arrivals.Swap(0)
		if !can || t.OwnedUntil.Load() != ownedNow || !t.Spillable() {
			delete(hot, name)
			continue
		}
		if rate, on := hot.Measure(name, n, threshold); on {
			go r.spillOn(ctx, name, rate)
		}
	}
}

// spillScan is the tenants a tick looks at. Only tenants that had requests
// can turn hot, and only those with a spill need watching: a node
// configured with 100 000 tenants does not look at each one four times a
// second.
func (r *Router) spillScan(st *tenant.State, arrived []*tenant.Tenant) func(yield func(string, *tenant.Tenant) bool) {
	return func(yield func(string, *tenant.Tenant) bool) {
		if r.spillover.Spills.Load() > 0 {
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

// noteArrival lists t for the spillover loop's next tick: its first
// request since the last tick.
func (r *Router) noteArrival(t *tenant.Tenant) {
	r.arrived.Add(t)
}

// spillOn switches a tenant this node owns to spillover.
func (r *Router) spillOn(ctx context.Context, name string, rate float64) {
	r.reloads.mu.Lock()
	t := r.state.Load().ByName[name]
	if t == nil || t.Spilled() != nil {
		r.reloads.mu.Unlock()
		return
	}
	sp := r.spillover.Own(t.Name, t.Limits)
	t.Core().Spill.Store(sp)
	sp.WatchLine()
	r.reloads.mu.Unlock()

	if !r.spillover.Start(sp, r.spillTenant(t), rate) {
		return
	}
	r.runOwnerSpill(ctx, name, sp)
}

// runOwnerSpill renews the owner's announcement every tick, sums the
// cluster's arrivals, and ends the spill when the tenant cools, Redis stops
// answering, or this node stops owning it.
func (r *Router) runOwnerSpill(ctx context.Context, name string, sp *spill.Spill) {
	var cool spill.Cooling
	tick := time.NewTicker(spill.Tick)
	defer tick.Stop()
	for {
		st := r.state.Load()
		t := st.ByName[name]
		if t == nil || t.Spilled() != sp || sp.Ending() {
			return // ended elsewhere (a handover), or the tenant is gone
		}
		if ctx.Err() != nil {
			// Stopped without a drain (a crash, to the cluster): the
			// members' spill lapses by itself.
			return
		}
		reason := r.ownerSpillEnds(st, t, sp)
		if reason == "" {
			arrivals := t.Arrivals.Swap(0) + r.spillover.Announce(r.spillTenant(t), sp, true, spill.CallTimeout)
			if cool.Cooled(arrivals, st.Cfg.Limits.SpilloverRPS) {
				reason = "cooled"
			}
		}
		if reason != "" {
			r.spillOff(name, sp, reason)
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

// ownerSpillEnds is why the owner ends t's spill sp now, its rate aside;
// "" if it goes on.
func (r *Router) ownerSpillEnds(st *tenant.State, t *tenant.Tenant, sp *spill.Spill) string {
	switch {
	case r.life.draining.Load():
		return "drain"
	case st.Cfg.Limits.SpilloverRPS <= 0 || !t.Spillable():
		return "disabled"
	case t.OwnedUntil.Load() != ownedNow:
		return "owner_changed"
	case sp.Budget.Stats(r.clock()).Degraded:
		return "store_unreachable"
	}
	return ""
}

// spillOff ends a spill this node owns (spill.Node's End).
func (r *Router) spillOff(name string, sp *spill.Spill, reason string) {
	r.endSpill(r.state.Load().ByName[name], name, sp, reason)
}

// endSpill is spillOff for tenant t, which may be one a reload has just
// removed: its core is kept a while (and put back if a later reload
// restores the tenant), so its limiter must not stay sealed with no spill
// behind it.
func (r *Router) endSpill(t *tenant.Tenant, name string, sp *spill.Spill, reason string) {
	var st *spill.Tenant
	if t != nil {
		st = r.spillTenant(t)
		st.Name = name
	}
	r.spillover.End(st, sp, reason)
}

// endSpillsMovedBy ends the spills this node owns of tenants the view v
// gives another owner, before v is in force.
func (r *Router) endSpillsMovedBy(v *view) {
	var names []string
	for name, t := range r.state.Load().ByName {
		if sp := t.Spilled(); sp != nil && sp.Owner == r.node {
			if o := v.owner(name); o != "" && o != r.node {
				names = append(names, name)
			}
		}
	}
	r.endOwnedSpills(names)
}

// endOwnedSpills ends the spills this node owns of the tenants named, all
// at once.
func (r *Router) endOwnedSpills(names []string) {
	if r.spillover.Owned() == 0 {
		return
	}
	var wg sync.WaitGroup
	for _, name := range names {
		if t := r.state.Load().ByName[name]; t == nil || t.Spilled() == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.endOwnedSpill(name)
		}()
	}
	wg.Wait()
}

// endOwnedSpill ends, before its state is handed over, a spill of a tenant
// this node owns (a handoff asks for it).
func (r *Router) endOwnedSpill(name string) {
	t := r.state.Load().ByName[name]
	if t == nil {
		return
	}
	sp := t.Spilled()
	if sp == nil || sp.Owner != r.node {
		return
	}
	if t.OwnerSpill(r.node) != sp {
		return // failed to start
	}
	// The owner's loop sees the spill gone and stops.
	r.spillOff(name, sp, "handover")
}

// serveSpill takes an owner's announcement.
func (r *Router) serveSpill(ctx *fasthttp.RequestCtx) {
	info, ok := r.peerPost(ctx)
	if !ok {
		return
	}
	var m spill.Msg
	if err := json.Unmarshal(ctx.PostBody(), &m); err != nil || m.Tenant == "" || m.Owner != info.From {
		fail(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "invalid_json", "Malformed spillover announcement.")
		return
	}
	t := r.state.Load().ByName[m.Tenant]
	if t == nil {
		fail(ctx, fasthttp.StatusNotFound, "invalid_request_error", "unknown_tenant", "No tenant named "+m.Tenant+".")
		return
	}
	if !m.On {
		r.spillEnded(ctx, t, &m)
		return
	}
	r.spillAnnounced(ctx, t, &m)
}

// spillEnded takes an owner's word that t's spill ended: this node stops
// and answers once what it admitted reached the owner.
func (r *Router) spillEnded(ctx *fasthttp.RequestCtx, t *tenant.Tenant, m *spill.Msg) {
	cur := t.Spilled()
	var arrivals int64
	delivered := true
	if cur != nil && cur.Owner == m.Owner && cur.Epoch == m.Epoch {
		arrivals = cur.Arrivals()
		delivered = r.leaveSpill(t, cur, "owner_ended")
	} else if c := t.Peek(); c != nil && !c.Fb.Delivered() {
		// Left already (abandoned, lapsed), and what it admitted on
		// the spill or its share since has not reached the owner: the
		// owner must not take this as confirmed.
		r.reportFallback(t)
		delivered = c.Fb.Delivered()
	}
	if !delivered {
		fail(ctx, fasthttp.StatusServiceUnavailable, "server_error", "ledger_undelivered", "This node could not report what it admitted.")
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, spill.Reply{Arrivals: arrivals})
}

// spillAnnounced takes an owner's word that t spills: this node joins the
// spill, or renews it, unless it must not serve it.
func (r *Router) spillAnnounced(ctx *fasthttp.RequestCtx, t *tenant.Tenant, m *spill.Msg) {
	cur := t.Spilled()
	refuse := func(code, msg string) {
		fail(ctx, fasthttp.StatusConflict, "invalid_request_error", code, msg)
	}
	if code, msg := r.spillover.Refusal(m, cur, spillMember{r: r, t: t}); code != "" {
		refuse(code, msg)
		return
	}
	if cur == nil || cur.Owner != m.Owner || cur.Epoch != m.Epoch {
		if cur != nil {
			r.leaveSpill(t, cur, "replaced")
		}
		// Under reloads.mu: a reload keeps the budgets of the spills it
		// sees, and must see this one.
		r.reloads.mu.Lock()
		sp, ok := r.spillover.Join(*m, t.Core().Spill)
		r.reloads.mu.Unlock()
		if !ok {
			refuse("busy", "Another spillover change is in progress.")
			return
		}
		cur = sp
	} else if cur.Budget.Stats(r.clock()).Limits != m.Limits {
		cur.Budget.SetLimits(m.Limits, lease.Share) // the owner reloaded
	}
	writeJSON(ctx, fasthttp.StatusOK, spill.Reply{Arrivals: r.spillover.Renew(cur)})
}

// spillMember is t as an owner's "on" finds it on this node.
type spillMember struct {
	r *Router
	t *tenant.Tenant
}

func (m spillMember) RingOwner() string { return m.r.view.Load().owner(m.t.Name) }

func (m spillMember) Holder() *spill.Holder { return m.t.Core().Spill }

func (m spillMember) InFallback() bool { return m.t.Falling() || !m.t.Core().Fb.Delivered() }

// spillCarriedEnded brings into a spill this node owns what ds report of
// calls admitted outside it (spill.Node's CarriedEnded).
func (r *Router) spillCarriedEnded(t *tenant.Tenant, ds []limiter.Delta) {
	sp := t.Spilled()
	if sp == nil || sp.Owner != r.node {
		return
	}
	r.spillover.CarriedEnded(sp, ds)
}

// spillView is the tenant's spillover as /tenants/{name} shows it.
func (r *Router) spillView(t *tenant.Tenant) status.Spill {
	return r.spillover.View(t.Spilled())
}
