package router

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/away"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// The router's part in a handoff: holding a tenant's requests while its new
// owner (this node) loads the tenant's state, and telling the owner about
// calls that this node admitted before the tenant moved away and that end
// here afterwards. The protocol that decides when to hold, freeze and
// import is the handoff package's.

// deltaPath receives deltas from peers; it is signed like a hop.
const deltaPath = "/_ringgate/delta"

// deltaTimeout bounds one delivery of deltas (a call's end waits for a
// fallback report in flight, fallback.go).
const deltaTimeout = 500 * time.Millisecond

// Hold makes the tenant's requests wait (at most wait) before their first
// decision here, until Release: a new owner loads the tenant's state first
// rather than admit blind. It reports false for an unknown tenant.
func (r *Router) Hold(name string, wait time.Duration) bool {
	// Under reloads.mu: a reload copies the gate to the new state's tenant,
	// and must not copy one that is being swapped (a gate left closed
	// on the new struct would hold the tenant for good).
	r.reloads.mu.Lock()
	defer r.reloads.mu.Unlock()
	t := r.state.Load().ByName[name]
	if t == nil {
		return false
	}
	g := tenant.NewGate(wait, r.clk)
	if old := t.Gate.Swap(g); old != nil {
		old.Release()
	}
	return true
}

// Release lets the tenant's held requests through, after applying the
// deltas that reached this node for the tenant before it took the tenant
// over (see serveDelta). The node calls it once it has loaded the tenant's
// state, or, without snapshots, once its ring makes it the owner.
func (r *Router) Release(name string) {
	r.reloads.mu.Lock()
	defer r.reloads.mu.Unlock()
	t := r.state.Load().ByName[name]
	if t == nil {
		return
	}
	var g *tenant.Gate
	// Still frozen for another node (a take-back that got nothing: the
	// tenant stays there): the deltas go on to it, the node that counts
	// them; applied to the frozen windows here they would count nowhere.
	passOn := map[string][]limiter.Delta{}
	r.moving.held.Release(name, func(ds []away.Kept) {
		g = t.Gate.Swap(nil)
		if len(ds) == 0 {
			return
		}
		now, lim := r.clock(), t.Core().Lim
		moved := lim.MovedTo() != "" && lim.MovedTo() != r.node
		for _, h := range ds {
			switch {
			case now-h.At >= int64(lim.Window()):
			case moved:
				passOn[h.From] = append(passOn[h.From], h.Delta)
			default:
				lim.ApplyFrom(now, h.From, h.Delta)
			}
		}
	})
	for from, pds := range passOn {
		r.sendDeltas(t, from, pds, 1)
	}
	r.dropGoneSlots(t, r.view.Load())
	if g != nil {
		g.Release()
	}
	if c := t.Peek(); c != nil {
		c.Queue.Kick()
	}
}

// dropGoneSlots frees the tenant's slots of calls that ran on nodes no
// longer members: declared dead (or left), their calls died with them, so
// their slots must not wait for the slot TTL.
func (r *Router) dropGoneSlots(t *tenant.Tenant, v *view) {
	c := t.Peek()
	if v == nil || len(v.addrs) == 0 || c == nil {
		return
	}
	for _, n := range c.Lim.AwayNodes() {
		if _, member := v.addrs[n]; !member {
			if freed := c.Lim.DropNode(r.clock(), n); freed > 0 {
				r.log.Info("handoff", "phase", "slots_dropped", "tenant", t.Name, "node", n, "slots", freed)
			}
		}
	}
}

// hold keeps ds for the tenant t if it is not taken over yet (away.Held),
// and reports whether it did.
func (r *Router) hold(t *tenant.Tenant, now int64, from string, ds []limiter.Delta) bool {
	return r.moving.held.Hold(t.Name, now, t.Core().Lim.Window(), from, ds, func() bool {
		return t.Gate.Load() == nil && r.counts(t.Name, from)
	})
}

// SweepHeld passes on the deltas that have waited away.HeldFor at this
// node for a tenant it did not take over (the tenant went past this node:
// a join coalesced with the next change, say). Dropped, they would leave
// their slots counted at the tenant's owner until slot_ttl.
func (r *Router) SweepHeld() {
	now := r.clock()
	if v := r.view.Load(); r.clustered && (v == nil || v.ring.Len() == 0) {
		// No ring yet (a slow join): the node that counts the tenants is
		// not known, and the handoff this node's first ring starts may
		// import windows over what would be applied here (counts).
		return
	}
	st := r.state.Load()
	due := r.moving.held.Due(now, func(name string) (gone, taking bool) {
		t := st.ByName[name]
		return t == nil, t != nil && t.Gate.Load() != nil
	})
	for name, hs := range due {
		t := st.ByName[name]
		byFrom := map[string][]limiter.Delta{}
		for _, h := range hs {
			byFrom[h.From] = append(byFrom[h.From], h.Delta)
		}
		for from, ds := range byFrom {
			if dest, _ := r.deltaDest(t); dest == "" || dest == r.node {
				now := r.clock()
				for _, d := range ds {
					t.Core().Lim.ApplyFrom(now, from, d)
				}
				continue
			}
			r.log.Info("handoff", "phase", "held_deltas_passed_on", "tenant", t.Name, "deltas", len(ds))
			r.sendDeltas(t, from, ds, 1)
		}
	}
}

// Held reports whether the tenant's requests are held for a handoff.
func (r *Router) Held(name string) bool {
	t := r.state.Load().ByName[name]
	return t != nil && t.Gate.Load() != nil
}

// Limiter is the tenant's owner limiter (nil for an unknown tenant), for the
// node to export and import its state.
func (r *Router) Limiter(name string) *limiter.Tenant {
	if t := r.state.Load().ByName[name]; t != nil {
		return t.Core().Lim
	}
	return nil
}

// Counted is the tenant's owner limiter if this node ever counted the
// tenant (its core was made), else nil.
func (r *Router) Counted(name string) *limiter.Tenant {
	if t := r.state.Load().ByName[name]; t != nil {
		if c := t.Peek(); c != nil {
			return c.Lim
		}
	}
	return nil
}

// MovedTo is the node the tenant was handed to ("" if none, or unknown),
// without making its core.
func (r *Router) MovedTo(name string) string {
	t := r.state.Load().ByName[name]
	if t == nil {
		return ""
	}
	return t.MovedTo()
}

// Thaw makes this node count the tenant again (limiter.Tenant.Thaw),
// without making its core.
func (r *Router) Thaw(name string) {
	if t := r.state.Load().ByName[name]; t != nil {
		r.cores.Thaw(t)
	}
}

// Freeze hands the tenant over to the node to (limiter.Tenant.Freeze)
// and returns its state; false for an unknown tenant. A tenant never
// counted here is handed empty without making its core.
func (r *Router) Freeze(name string, now int64, to string) (limiter.State, bool) {
	t := r.state.Load().ByName[name]
	if t == nil {
		return limiter.State{}, false
	}
	return r.cores.Freeze(t, now, to), true
}

// Owns reports whether this node's ring makes it the tenant's owner (a
// standalone node owns everything).
func (r *Router) Owns(name string) bool {
	o := r.view.Load().owner(name)
	return o == "" || o == r.node
}

// counts reports whether deltas from node from ("": this one) for the
// tenant are this node's to apply now. A peer's deltas reach a node only
// in a cluster, so a node with no ring yet (it has just joined) does not
// own the tenant for them, whatever Owns says standalone: the previous
// owner may have handed the tenant to it already, and the handoff that
// this node's first ring starts imports windows that a release applied
// now would be lost under (the slot it frees held for good).
func (r *Router) counts(name, from string) bool {
	o := r.view.Load().owner(name)
	return o == r.node || o == "" && (from == "" || !r.clustered)
}

// deltaMsg is a batch of deltas for one tenant, sent to its owner.
type deltaMsg struct {
	Tenant string `json:"tenant"`
	// From is the node whose calls the deltas are (the first sender; a
	// node passing them on keeps it). Their slots count as that node's.
	From   string          `json:"from,omitempty"`
	Deltas []limiter.Delta `json:"deltas"`
}

// reportDelta sends a delta of a call admitted here to the node that counts
// the tenant now: the one this node handed it over to, else its owner by
// the ring. Best effort and asynchronous: if it is lost, a slot frees
// itself with its TTL and a token delta is forgotten with its window.
func (r *Router) reportDelta(t *tenant.Tenant, d limiter.Delta) {
	r.sendDeltas(t, "", []limiter.Delta{r.ids.Name(d)}, 0)
}

// applyOnce applies the deltas of ds not applied here before (package deltaid),
// through the hold while the tenant is not taken over; from is the node
// whose calls they are ("": this one).
func (r *Router) applyOnce(t *tenant.Tenant, now int64, from string, ds []limiter.Delta) (applied int) {
	origin := from
	if origin == "" {
		origin = r.node
	}
	ds = r.ids.Fresh(origin, now, 2*int64(t.Core().Lim.Window()), ds)
	if !r.hold(t, now, from, ds) {
		for _, d := range ds {
			t.Core().Lim.ApplyFrom(now, from, d)
		}
		if from != "" && r.hasDeparted(from) {
			// From a node that has left the view (its report was on the
			// way when it died, or passed on by another): the slots of
			// its calls died with it, and no membership change is coming
			// to free them.
			r.dropGoneSlots(t, r.view.Load())
		}
		r.spillCarriedEnded(t, ds)
		t.Core().Queue.Kick()
	}
	return len(ds)
}

// sendDeltas sends deltas of calls running on node from ("": this one) for
// t on, in the background; forwarded counts how often they were passed on
// already (a tenant handed over twice in a row).
func (r *Router) sendDeltas(t *tenant.Tenant, from string, ds []limiter.Delta, forwarded int) {
	if dest, _ := r.deltaDest(t); dest == "" || dest == r.node {
		_ = r.deliverDeltas(t, from, ds, forwarded) // local: nothing to wait for
		return
	}
	// Sent again while they do not get through, for a window at most
	// (away.Retries).
	go r.moving.retries.Deliver(t.Core().Lim.Window(), r.life.quit, r.metrics.DeltaRetriesDropped, func() error {
		return r.deliverDeltas(t, from, ds, forwarded)
	})
}

// deltaDest is the node that counts t now: the one this node handed it over
// to, else its owner by the ring.
func (r *Router) deltaDest(t *tenant.Tenant) (string, *view) {
	v := r.view.Load()
	if dest := t.Core().Lim.MovedTo(); dest != "" {
		return dest, v
	}
	return v.owner(t.Name), v
}

// deliverDeltas gives ds, deltas of calls running on node from ("": this
// one), to the node that counts t now and reports whether it took them.
func (r *Router) deliverDeltas(t *tenant.Tenant, from string, ds []limiter.Delta, forwarded int) error {
	if from == r.node {
		from = ""
	}
	dest, v := r.deltaDest(t)
	if dest != "" && dest != r.node && (v == nil || v.addrs[dest] == "") {
		// Handed to a node this one's gossip does not list yet (it
		// asked for the tenant right after joining): wait for its
		// address; if it never comes (it is gone), the ring's owner has
		// or will take the tenant.
		v, _ = r.view.await(hopCatchUp, func(v *view) bool { return v != nil && v.addrs[dest] != "" })
		if v == nil || v.addrs[dest] == "" {
			dest = v.owner(t.Name)
		}
	}
	if dest == "" || (dest == r.node && t.Core().Lim.MovedTo() == "") {
		// The tenant is (back) here: count it here, through the same
		// hold as a peer's deltas, so an import cannot wipe it.
		r.applyOnce(t, r.clock(), from, slices.Clone(ds))
		return nil
	}
	if from == "" {
		from = r.node
	}
	addr := v.addrs[dest]
	if !r.hops.Enabled() || forwarded >= maxHops || addr == "" || dest == r.node {
		r.logDeltaLost(t, dest, "no signed path to the node counting the tenant", 0)
		return fmt.Errorf("%w to %s", away.ErrNoPath, dest)
	}
	// Tried even when the peer is marked down for hops: an owner slow to
	// accept is still alive and must learn of these (fallback.go).
	r.metrics.DeltasSent.Add(float64(len(ds)))
	status, _, err := r.peerCall(v, addr, dest, deltaPath, deltaMsg{Tenant: t.Name, From: from, Deltas: ds}, forwarded+1, deltaTimeout)
	if err != nil || status != fasthttp.StatusNoContent {
		r.logDeltaLost(t, dest, fmt.Sprint(err), status)
		return fmt.Errorf("%w to %s", away.ErrUndelivered, dest)
	}
	return nil
}

// serveDelta applies deltas a peer reports for a tenant.
func (r *Router) serveDelta(ctx *fasthttp.RequestCtx) {
	info, ok := r.peerPost(ctx)
	if !ok {
		return
	}
	var m deltaMsg
	if err := json.Unmarshal(ctx.PostBody(), &m); err != nil {
		fail(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "invalid_json", "Malformed delta.")
		return
	}
	t := r.state.Load().ByName[m.Tenant]
	if t == nil {
		fail(ctx, fasthttp.StatusNotFound, "invalid_request_error", "unknown_tenant", "No tenant named "+m.Tenant+".")
		return
	}
	if to := t.Core().Lim.MovedTo(); to != "" && to != r.node {
		// Handed on since the sender looked: the deltas follow the state.
		from := m.From
		if from == "" {
			from = info.From
		}
		r.sendDeltas(t, from, m.Deltas, info.Hops)
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return
	}
	now := r.clock()
	from := m.From
	if from == "" {
		from = info.From
	}
	if from == r.node {
		from = "" // this node's own calls, reported back to it
	}
	r.metrics.DeltasApplied.Add(float64(r.applyOnce(t, now, from, m.Deltas)))
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}

// deltaLostEvery bounds the delta_lost lines to one a tenant a second:
// with its owner gone, a tenant's fallback ledger fails a report every few
// milliseconds.
const deltaLostEvery = time.Second

// logDeltaLost warns that deltas for t did not reach owner, at most once a
// deltaLostEvery; a line says how many failures it stands for.
func (r *Router) logDeltaLost(t *tenant.Tenant, owner, reason string, status int) {
	if ok, muted := t.Core().LostLog.Allow(r.clock(), deltaLostEvery); ok {
		r.log.Warn("handoff", "phase", "delta_lost", "tenant", t.Name, "owner", owner, "error", reason, "status", status, "not_logged", muted)
	}
}
