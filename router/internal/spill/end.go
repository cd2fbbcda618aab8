package spill

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
)

// Tenant is a spilled tenant's parts on this node, as switching its spill
// on and off needs them.
type Tenant struct {
	Name   string
	Limits limiter.Limits
	Lim    *limiter.Tenant // its owner's limiter: sealed while this node owns its spill
	Holder *Holder
	Queue  *queue.Queue // its line on its owner
	Ledger Ledger
}

// Ledger is what this node admitted for a tenant on its spill or its
// fallback share (the router's fallback ledger), which must reach the node
// counting the tenant.
type Ledger interface {
	// Report sends it now, and reports whether all of it got there.
	Report() bool
	// Share is the tenant's fallback share, made now if it was not yet.
	Share() *limiter.Tenant
	// Send sends the delta, named, to the node counting the tenant.
	Send(d limiter.Delta)
}

// A View is this node's view of the cluster as an announcement needs it.
type View struct {
	// Others are the other members with an address, by name: a map of
	// the announcement's own, which adds to it.
	Others map[string]string
	Addrs  map[string]string // every node the view knows, by name
	// Call posts msg, signed, to node at addr within timeout.
	Call func(node, addr string, msg Msg, timeout time.Duration) (status int, body []byte, err error)
}

// Peers loads this node's view now; nil: none yet.
type Peers func() *View

// Announce tells every other member of t's spill sp (on) or its end (off),
// in parallel, and returns the arrivals they report; sp's told records who
// took an "on", and loses who acknowledged an "off".
func (n *Node) Announce(t *Tenant, sp *Spill, on bool, timeout time.Duration) int64 {
	v := n.Peers()
	if v == nil {
		return 0
	}
	msg := Msg{Tenant: t.Name, Owner: sp.Owner, Epoch: sp.Epoch, On: on, Limits: t.Limits, Window: sp.Window}
	targets := v.Others
	sp.toldMu.Lock()
	defer sp.toldMu.Unlock()
	if on && sp.ending.Load() {
		return 0 // ending: no more "on" after the "off"
	}
	told := sp.told
	if !on {
		// Whoever took the spill and left the view since must hear it too
		// if it still answers.
		for node := range told {
			if _, ok := targets[node]; !ok {
				if addr := v.Addrs[node]; addr != "" {
					targets[node] = addr
				}
			}
		}
	}
	var sum int64
	for _, a := range ask(v, targets, msg, timeout) {
		sum += a.arrivals
		switch {
		case on:
			// Tried is enough: a member may have taken it and lost the
			// answer.
			told[a.node] = a.sent
		case a.ok:
			delete(told, a.node)
		}
	}
	return sum
}

// answer is a member's to an announcement.
type answer struct {
	node     string
	ok       bool
	arrivals int64
	sent     time.Time
}

// ask sends msg to every target (address by name) in parallel, and
// returns their answers.
func ask(v *View, targets map[string]string, msg Msg, timeout time.Duration) []answer {
	var wg sync.WaitGroup
	answers := make(chan answer, len(targets))
	for node, addr := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := time.Now()
			status, body, err := v.Call(node, addr, msg, timeout)
			a := answer{node: node, sent: sent, ok: err == nil && status == http.StatusOK}
			if a.ok {
				var rep Reply
				if json.Unmarshal(body, &rep) == nil {
					a.arrivals = rep.Arrivals
				}
			}
			answers <- a
		}()
	}
	wg.Wait()
	close(answers)
	var out []answer
	for a := range answers {
		out = append(out, a)
	}
	return out
}

// End ends sp, a spill this node owns of t (nil: a tenant gone, whose
// limiter is not sealed for it). The members stop, report what they
// admitted and confirm (Announce); then the owner reports its own, unseals
// and decides alone again. A member that did not confirm may still admit
// on its spill until it lapses (leaseTerm after the last word it had): the
// spill's window in Redis is fenced first — no node is granted a block on
// it any more, so what it held then (every node's uses, its blocks
// outstanding counted whole) bounds the requests and tokens — and the
// owner's limiter counts at least that, and, for the member's calls in
// flight, every slot it does not know of until the lapse.
func (n *Node) End(t *Tenant, sp *Spill, reason string) {
	if !sp.ending.CompareAndSwap(false, true) {
		// Ending already (cooled, drained): at most an announcement, a
		// fence and a report away.
		waitClosed(n.Clock, sp.done, n.EndWait)
		return
	}
	defer close(sp.done)
	if t == nil {
		n.owned.Add(-1)
		return
	}
	timeout := CallTimeout
	if reason == "handover" {
		timeout = handoverTimeout
	}
	n.Announce(t, sp, false, timeout)
	sp.toldMu.Lock()
	unconfirmed := len(sp.told)
	sp.toldMu.Unlock()
	var used lease.Amount
	var fenceErr error
	if unconfirmed > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), FenceWait)
		used, fenceErr = n.Leaser.Fence(ctx, sp.Budget, leaseTerm+Tick)
		cancel()
	}
	// What this node admitted on the spill goes into its limiter: most of
	// it now, while requests still go on the spill (a report in flight
	// can take up to the router's deltaTimeout), the rest with the spill
	// closed.
	t.Ledger.Report()
	sp.mu.Lock()
	sp.closed.Store(true)
	t.Ledger.Report()
	if unconfirmed > 0 {
		n.chargeUnreported(t, used, fenceErr)
	}
	// Unsealed first: a request that sees no spill finds the limiter
	// deciding again.
	t.Lim.Unseal()
	t.Holder.CompareAndSwap(sp, nil)
	t.Holder.EndEpoch(sp.Epoch)
	sp.mu.Unlock()
	t.Queue.Kick()
	sp.Line.Kick() // those waiting for the spill are decided again
	n.Leaser.Retire(sp.Key)
	n.owned.Add(-1)
	n.Phase("off")
	n.Log.Info("spillover", "phase", "off", "tenant", t.Name, "reason", reason,
		"spilled_ms", sp.clk.Since(sp.since).Milliseconds(), "unconfirmed", unconfirmed)
}

// chargeUnreported makes the limiter count what members that did not
// confirm the spill's end may have admitted and not reported: up to what
// the fenced window held (without an answer from Redis, the rest of the
// window: the limits reopen as it passes), and every free slot until their
// spill has lapsed. A limiter handed over meanwhile gets it as a delta.
func (n *Node) chargeUnreported(t *Tenant, used lease.Amount, fenceErr error) {
	now := n.now()
	cfg := n.Limits()
	u := t.Lim.Usage(now)
	if fenceErr != nil {
		used = lease.Amount{Requests: max(0, t.Limits.Requests), Tokens: max(0, t.Limits.Tokens)}
	}
	d := limiter.Delta{Bucket: now / max(1, int64(cfg.Window)/limiter.Buckets),
		SlotBucket: now / max(1, int64(cfg.SlotTTL)/limiter.Buckets),
		Requests:   max(0, used.Requests-u.Requests), Tokens: max(0, used.Tokens-u.Tokens)}
	if c := t.Limits.Concurrency; c > 0 {
		d.Slots = max(0, c-u.InFlight)
	}
	if d.Requests > 0 || d.Tokens > 0 || d.Slots > 0 {
		t.Ledger.Send(d)
		if d.Slots > 0 {
			release := limiter.Delta{Bucket: d.Bucket, SlotBucket: d.SlotBucket, Slots: -d.Slots}
			time.AfterFunc(leaseTerm+Tick, func() { t.Ledger.Send(release) })
		}
	}
	storeErr := ""
	if fenceErr != nil {
		storeErr = fenceErr.Error()
	}
	n.Log.Warn("spillover", "phase", "unconfirmed", "tenant", t.Name, "charged_requests", d.Requests, "charged_tokens", d.Tokens,
		"held_slots", d.Slots, "store_error", storeErr)
}

// Leave stops serving sp, a spill of t this node does not own: from now on
// the tenant's requests go to its owner; what this node admitted on the
// spill is reported, and its blocks given back. It reports whether the
// report reached the node counting the tenant.
func (n *Node) Leave(t *Tenant, sp *Spill, reason string) bool {
	sp.mu.Lock()
	was := sp.closed.Swap(true)
	if reason != "owner_unreachable" {
		// Never again for this epoch. An abandoned spill may be joined
		// again if its owner turns out alive (an "on" it takes).
		t.Holder.EndEpoch(sp.Epoch)
	}
	t.Holder.LeftAt.Store(n.now()) // before the spill is gone: the router's answers-miss check sees one or the other
	t.Holder.CompareAndSwap(sp, nil)
	sp.mu.Unlock()
	sp.Line.Kick() // those waiting for the spill are decided again
	delivered := t.Ledger.Report()
	if !was && (!delivered || reason == "owner_silent" || reason == "owner_unreachable") {
		// The owner may be gone: the snapshot a fallback share would be
		// seeded with does not hold what this node admitted on the spill
		// lately. The share counts it itself.
		chargeMirror(t.Ledger.Share(), sp.Mirror, n.now())
	}
	if !was {
		n.Leaser.Retire(sp.Key) // its slots held while its calls run
		if reason != "owner_ended" {
			n.Phase("left")
			n.Log.Info("spillover", "phase", "left", "tenant", t.Name, "owner", sp.Owner, "reason", reason)
		}
		if sp.done != nil {
			close(sp.done)
		}
	}
	return delivered
}
