package moves

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/away"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// DeltaPath receives deltas from peers; it is signed like a hop.
const DeltaPath = "/_ringgate/delta"

// DeltaTimeout bounds one delivery of deltas (a call's end waits for a
// fallback report in flight).
const DeltaTimeout = 500 * time.Millisecond

// ErrMalformed: a peer's request could not be decoded.
var ErrMalformed = errors.New("malformed peer request")

// ErrUnknownTenant: a peer's request names a tenant not configured here.
var ErrUnknownTenant = errors.New("unknown tenant")

// deltaMsg is a batch of deltas for one tenant, sent to its owner.
type deltaMsg struct {
	Tenant string `json:"tenant"`
	// From is the node whose calls the deltas are (the first sender; a
	// node passing them on keeps it). Their slots count as that node's.
	From   string          `json:"from,omitempty"`
	Deltas []limiter.Delta `json:"deltas"`
}

// hold keeps ds for the tenant t if it is not taken over yet (away.Held),
// and reports whether it did.
func (n *Node) hold(t *tenant.Tenant, now int64, from string, ds []limiter.Delta) bool {
	return n.held.Hold(t.Name, now, t.Core().Lim.Window(), from, ds, func() bool {
		return t.Gate.Load() == nil && n.counts(t.Name, from)
	})
}

// Report sends a delta of a call admitted here to the node that counts
// the tenant now: the one this node handed it over to, else its owner by
// the ring. Best effort and asynchronous: if it is lost, a slot frees
// itself with its TTL and a token delta is forgotten with its window.
func (n *Node) Report(t *tenant.Tenant, d limiter.Delta) {
	n.Send(t, "", []limiter.Delta{n.cfg.IDs.Name(d)}, 0)
}

// Apply applies the deltas of ds not applied here before (package deltaid),
// through the hold while the tenant is not taken over; from is the node
// whose calls they are ("": this one).
func (n *Node) Apply(t *tenant.Tenant, now int64, from string, ds []limiter.Delta) (applied int) {
	origin := from
	if origin == "" {
		origin = n.cfg.Self
	}
	ds = n.cfg.IDs.Fresh(origin, now, 2*int64(t.Core().Lim.Window()), ds)
	if !n.hold(t, now, from, ds) {
		for _, d := range ds {
			t.Core().Lim.ApplyFrom(now, from, d)
		}
		if from != "" && n.cfg.Cluster.Departed(from) {
			// From a node that has left the view (its report was on the
			// way when it died, or passed on by another): the slots of
			// its calls died with it, and no membership change is coming
			// to free them.
			n.DropGoneSlots(t, n.cfg.Cluster.View())
		}
		n.cfg.Applied(t, ds)
		t.Core().Queue.Kick()
	}
	return len(ds)
}

// Send sends deltas of calls running on node from ("": this one) for
// t on, in the background; forwarded counts how often they were passed on
// already (a tenant handed over twice in a row).
func (n *Node) Send(t *tenant.Tenant, from string, ds []limiter.Delta, forwarded int) {
	if dest, _ := n.dest(t); dest == "" || dest == n.cfg.Self {
		_ = n.Deliver(t, from, ds, forwarded) // local: nothing to wait for
		return
	}
	// Sent again while they do not get through, for a window at most
	// (away.Retries).
	go n.retries.Deliver(t.Core().Lim.Window(), n.cfg.Quit, n.cfg.Metrics.DeltaRetriesDropped, func() error {
		return n.Deliver(t, from, ds, forwarded)
	})
}

// Retrying is how many deliveries are being sent again.
func (n *Node) Retrying() int64 { return n.retries.Running() }

// dest is the node that counts t now: the one this node handed it over
// to, else its owner by the ring.
func (n *Node) dest(t *tenant.Tenant) (string, View) {
	v := n.cfg.Cluster.View()
	if dest := t.Core().Lim.MovedTo(); dest != "" {
		return dest, v
	}
	return v.Owner(t.Name), v
}

// Deliver gives ds, deltas of calls running on node from ("": this
// one), to the node that counts t now and reports whether it took them.
func (n *Node) Deliver(t *tenant.Tenant, from string, ds []limiter.Delta, forwarded int) error {
	if from == n.cfg.Self {
		from = ""
	}
	dest, v := n.dest(t)
	if addr, _ := v.Addr(dest); dest != "" && dest != n.cfg.Self && addr == "" {
		// Handed to a node this one's gossip does not list yet (it
		// asked for the tenant right after joining): wait for its
		// address; if it never comes (it is gone), the ring's owner has
		// or will take the tenant.
		v = n.cfg.Cluster.Await(n.cfg.CatchUp, func(v View) bool { a, _ := v.Addr(dest); return a != "" })
		if a, _ := v.Addr(dest); a == "" {
			dest = v.Owner(t.Name)
		}
	}
	if dest == "" || (dest == n.cfg.Self && t.Core().Lim.MovedTo() == "") {
		// The tenant is (back) here: count it here, through the same
		// hold as a peer's deltas, so an import cannot wipe it.
		n.Apply(t, n.clock(), from, slices.Clone(ds))
		return nil
	}
	if from == "" {
		from = n.cfg.Self
	}
	addr, _ := v.Addr(dest)
	if !n.cfg.Peers.Signed() || forwarded >= n.cfg.MaxHops || addr == "" || dest == n.cfg.Self {
		n.logDeltaLost(t, dest, "no signed path to the node counting the tenant", 0)
		return fmt.Errorf("%w to %s", away.ErrNoPath, dest)
	}
	// Tried even when the peer is marked down for hops: an owner slow to
	// accept is still alive and must learn of these (a fallback ledger
	// waits on them).
	n.cfg.Metrics.DeltasSent.Add(float64(len(ds)))
	status, _, err := n.cfg.Peers.Call(v, addr, dest, DeltaPath, deltaMsg{Tenant: t.Name, From: from, Deltas: ds}, forwarded+1, DeltaTimeout)
	if err != nil || status != fasthttp.StatusNoContent {
		n.logDeltaLost(t, dest, fmt.Sprint(err), status)
		return fmt.Errorf("%w to %s", away.ErrUndelivered, dest)
	}
	return nil
}

// Receive applies the deltas a peer (sender, the hops-th hop) reports for
// a tenant in body, or passes them on to the node it was handed to since.
// It returns the tenant named, and ErrMalformed or ErrUnknownTenant.
func (n *Node) Receive(body []byte, sender string, hops int) (string, error) {
	var m deltaMsg
	if err := json.Unmarshal(body, &m); err != nil {
		return "", ErrMalformed
	}
	t := n.tenant(m.Tenant)
	if t == nil {
		return m.Tenant, ErrUnknownTenant
	}
	if to := t.Core().Lim.MovedTo(); to != "" && to != n.cfg.Self {
		// Handed on since the sender looked: the deltas follow the state.
		from := m.From
		if from == "" {
			from = sender
		}
		n.Send(t, from, m.Deltas, hops)
		return m.Tenant, nil
	}
	now := n.clock()
	from := m.From
	if from == "" {
		from = sender
	}
	if from == n.cfg.Self {
		from = "" // this node's own calls, reported back to it
	}
	n.cfg.Metrics.DeltasApplied.Add(float64(n.Apply(t, now, from, m.Deltas)))
	return m.Tenant, nil
}

// deltaLostEvery bounds the delta_lost lines to one a tenant a second:
// with its owner gone, a tenant's fallback ledger fails a report every few
// milliseconds.
const deltaLostEvery = time.Second

// logDeltaLost warns that deltas for t did not reach owner, at most once a
// deltaLostEvery; a line says how many failures it stands for.
func (n *Node) logDeltaLost(t *tenant.Tenant, owner, reason string, status int) {
	if ok, muted := t.Core().LostLog.Allow(n.clock(), deltaLostEvery); ok {
		n.cfg.Log.Warn("handoff", "phase", "delta_lost", "tenant", t.Name, "owner", owner, "error", reason, "status", status, "not_logged", muted)
	}
}
