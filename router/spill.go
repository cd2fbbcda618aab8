package router

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/router/internal/status"
)

// Hot-tenant spillover. A tenant whose requests arrive at its owner faster
// than limits.spillover_rps is served by every node itself, on blocks of
// its limits leased from Redis (package lease), instead of every request
// taking a hop to its owner:
//
//   - On. The owner seals its limiter (it decides nothing more there, so no
//     admission slips in after its state was read), starts the tenant's
//     budget in Redis from that state — the window's buckets and the slots
//     of the calls still running — and, once Redis holds it, serves the
//     tenant on the budget and tells every member so (a signed POST,
//     renewed every spillTick, that answers with the member's arrivals).
//   - Meanwhile every admission, on any node, is recorded in the fallback
//     ledger (fallback.go) and reported to the owner within milliseconds,
//     so the owner's sealed limiter keeps counting everything: it is the
//     tenant's state for a handoff, a snapshot, or the way back.
//   - Off (the cluster-wide rate stays below half the threshold, Redis
//     stops answering, the owner loses the tenant or drains). The owner
//     tells every member; each stops, reports what its ledger still holds
//     and answers; then the owner reports its own, unseals and decides
//     alone again. A member that does not answer stops by itself
//     spillLease after the owner's last word: the owner waits that out and
//     counts, on top, what Redis says the budget's window holds.
//
// An edge whose ring names another owner, or whose owner has gone silent,
// drops the spill and forwards as usual; its ledger goes to whoever owns
// the tenant then.

// spillPath receives an owner's word that a tenant spills (or no more).
const spillPath = "/_ringgate/spill"

const (
	// spillTick is how often the rates are measured and a spill renewed.
	spillTick = 250 * time.Millisecond
	// spillHot and spillCool are ticks in a row above the threshold (at
	// the owner) before a tenant spills, and below half of it
	// (cluster-wide) before it goes back.
	spillHot, spillCool = 2, 4
	// spillLease is how long an edge serves a spill after the owner's last
	// word.
	spillLease = 2 * time.Second
	// spillSeedWait bounds the owner's wait for Redis to hold the seed.
	spillSeedWait = 250 * time.Millisecond
	// spillCallTimeout bounds one announcement to a member.
	spillCallTimeout = 250 * time.Millisecond
	// spillEndWait bounds how long a request on the owner waits for a
	// spill that is ending to end (its members told, its window fenced,
	// its ledger reported: each bounded), to be decided on the unsealed
	// limiter rather than refused with a 503.
	spillEndWait = spillCallTimeout + 100*time.Millisecond + deltaTimeout + 150*time.Millisecond
	// spillBackoff is how long after a switch refused (Redis did not take
	// the seed) no tenant is switched: each try holds the tenant's
	// requests for up to spillSeedWait.
	spillBackoff = 5 * time.Second
)

// spillHolder is a tenant's spillover on this node, shared by the
// tenant's structs across reloads.
type spillHolder struct {
	atomic.Pointer[spill]
	// ended is the newest epoch this node stopped serving: an
	// announcement of it arriving late (after its end) is refused.
	ended atomic.Int64
	// live is the router's count of tenants with a spill, kept by Store
	// and CompareAndSwap (nil: not counted).
	live *atomic.Int64
	// leftAt is when (router clock) this node last stopped serving a spill
	// it did not own (leaveSpill): the owner's answers seen before then
	// miss what the cluster admitted on the spill. abandonedAt is when it
	// last abandoned one (abandonSpill): other nodes may have gone on
	// admitting on that budget, which knows nothing of this node's share.
	leftAt, abandonedAt atomic.Int64
}

// spillAbandoned marks a spill's until once this node abandoned it
// (abandonSpill): lapsed for edgeSpill, left by abandonSpill's own leave.
const spillAbandoned = -1

// answersMissSpill reports whether the owner's answers seen at (router
// clock) miss admissions on another node's spill that this node took part
// in: it serves one now, or left one after at.
func (t *tenant) answersMissSpill(self string, at int64) bool {
	c := t.peek()
	if c == nil {
		return false
	}
	if sp := c.spill.Load(); sp != nil && sp.owner != self {
		return true
	}
	return c.spill.leftAt.Load() > at
}

// abandonSpill leaves the tenant's spill of owner when a request this node
// forwarded to owner failed: it got here because the spill's budget
// stalled (Redis did not answer this node), and the owner does not answer
// either. The request goes to the fallback share; back on the budget once
// Redis answers, this node would admit on a window that knows nothing of
// what its share admitted. (An owner that is alive after all announces the
// spill again: this node rejoins once its share's admissions reached it,
// which charges them to the budget.)
func (r *Router) abandonSpill(t *tenant, owner string) {
	sp := t.spilled()
	if sp == nil || sp.owner != owner || owner == r.node {
		return
	}
	if u := sp.until.Load(); u == spillAbandoned || !sp.until.CompareAndSwap(u, spillAbandoned) {
		return // abandoned already, or renewed this instant: the next request sees it
	}
	t.c().spill.abandonedAt.Store(r.clock())
	go r.leaveSpill(t, sp, "owner_unreachable")
}

// Store sets the tenant's spill, counted.
func (h *spillHolder) Store(sp *spill) {
	h.count(h.Pointer.Swap(sp), sp)
}

// CompareAndSwap is atomic.Pointer's, counted.
func (h *spillHolder) CompareAndSwap(old, sp *spill) bool {
	if !h.Pointer.CompareAndSwap(old, sp) {
		return false
	}
	h.count(old, sp)
	return true
}

func (h *spillHolder) count(old, sp *spill) {
	switch {
	case h.live == nil:
	case old == nil && sp != nil:
		h.live.Add(1)
	case old != nil && sp == nil:
		h.live.Add(-1)
	}
}

// endEpoch records that the spill of epoch e ended here.
func (h *spillHolder) endEpoch(e int64) {
	for {
		cur := h.ended.Load()
		if e <= cur || h.ended.CompareAndSwap(cur, e) {
			return
		}
	}
}

// spill is a tenant's spillover as one node serves it.
type spill struct {
	owner  string
	epoch  int64 // the owner's clock when it started: names the budget
	key    string
	budget *lease.Budget
	// mirror is a limiter with no limits: it names each admission's
	// buckets for the ledger.
	mirror *limiter.Tenant
	window time.Duration // the budget's
	since  time.Time

	// Owner: ready is closed once the budget holds the seed, or the
	// switch failed (failed).
	ready  chan struct{}
	failed atomic.Bool
	// Owner: the members that took the spill, when they last did (the
	// owner's loop writes it; spillOff reads it once the loop is done
	// with it, or at a handover under toldMu).
	toldMu sync.Mutex
	told   map[string]time.Time
	ending atomic.Bool   // spillOff started
	done   chan struct{} // closed when spillOff is over (an edge: leaveSpill)

	// Admissions hold mu shared; ending the spill takes it, so none is
	// half done (on the budget, not yet in the ledger) when the ledger
	// is flushed. closed is set with mu held.
	mu     sync.RWMutex
	closed atomic.Bool

	until    atomic.Int64 // edge: serves until (router clock) unless renewed
	arrivals atomic.Int64 // edge: requests since the owner last asked

	// line is where this node's requests the budget refuses wait for it
	// (queue.go), as they would in the tenant's line on its owner.
	line queue.Queue
}

func spillKey(tenant string, epoch int64) string {
	return "tenant:" + tenant + "@" + strconv.FormatInt(epoch, 10)
}

// spillMsg is an owner's announcement. The owner's limits and window are
// the budget's (a rolling reload: every node leases on the owner's).
type spillMsg struct {
	Tenant string         `json:"tenant"`
	Owner  string         `json:"owner"`
	Epoch  int64          `json:"epoch"`
	On     bool           `json:"on"`
	Limits limiter.Limits `json:"limits"`
	Window time.Duration  `json:"window"`
}

// spillReply is a member's answer: the tenant's requests it took since the
// owner last asked.
type spillReply struct {
	Arrivals int64 `json:"arrivals"`
}

// newSpill makes the node's part of a spill; its budget is the leaser's.
func (r *Router) newSpill(t *tenant, owner string, epoch int64, limits limiter.Limits) *spill {
	cfg := r.state.Load().cfg
	sp := &spill{owner: owner, epoch: epoch, key: spillKey(t.name, epoch), since: time.Now(), window: cfg.Limits.Window,
		mirror: limiter.NewTenant(limiter.Limits{}, cfg.Limits.Window, cfg.Limits.SlotTTL)}
	sp.budget = r.leaser.Budget(lease.Config{Key: sp.key, Limits: limits, Window: cfg.Limits.Window,
		Settles: true, OnStoreDown: lease.Share}, func() int { return r.view.Load().liveMembers() })
	return sp
}

// watchLine has the spill's budget tell its line of room: once the spill
// is the tenant's (a spill that lost the race for it must not take the
// budget's watch from the one that won).
func (sp *spill) watchLine() { sp.budget.Watch(sp.line.Kick, sp.line.Waiting, nil) }

// lapsed reports whether the spill is over for this node: closed, or on a
// member, not renewed by its owner in time.
func (r *Router) lapsed(sp *spill) bool {
	return sp.closed.Load() || sp.owner != r.node && r.clock() > sp.until.Load()
}

// reloadSpills gives the spills this node owns the tenants' new limits (a
// reload); the members take them with the next announcement.
func (r *Router) reloadSpills(st *state) {
	for _, t := range st.byName {
		if sp := t.spilled(); sp != nil && sp.owner == r.node {
			sp.budget.SetLimits(t.limits, lease.Share)
		}
	}
}

// spillKeys are the budget keys of the spills this node serves (a reload
// keeps them).
func (st *state) spillKeys(keep map[string]bool) {
	for _, t := range st.byName {
		if sp := t.spilled(); sp != nil {
			keep[sp.key] = true
		}
	}
}

// spillable reports whether the tenant may spill: a tenant with a team or
// model limits does not (its spill's budget would not charge them; those
// levels are decided on its owner only).
func (t *tenant) spillable() bool {
	return t.kind == kindTenant && t.team == nil && t.models == nil
}

// canSpill reports whether this node can spill a tenant it owns: the
// budget needs Redis, the announcements signatures, and a second node.
func (r *Router) canSpill() bool {
	v := r.view.Load()
	return r.state.Load().cfg.Limits.SpilloverRPS > 0 && r.leaser.HasStore() && r.hops.Enabled() &&
		r.clustered && !r.life.draining.Load() && v != nil && len(v.members) > 1 && r.clock() >= r.spillover.retryAt.Load()
}

// ownerSpill is the spill this node, the tenant's owner, serves it on, once
// the budget is ready; nil when there is none (or it failed to start).
func (t *tenant) ownerSpill(self string) *spill {
	sp := t.spilled()
	if sp == nil || sp.owner != self || sp.closed.Load() {
		return nil
	}
	select {
	case <-sp.ready:
	default:
		// Starting: wait for Redis to hold the seed (or the switch to fail).
		timer := time.NewTimer(spillSeedWait + 50*time.Millisecond)
		select {
		case <-sp.ready:
		case <-timer.C:
		}
		timer.Stop()
	}
	if sp.failed.Load() || !isClosed(sp.ready) || sp.closed.Load() {
		return nil
	}
	return sp
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// edgeSpill is the spill this node serves the tenant on instead of
// forwarding to owner; nil when there is none, or while Redis does not
// answer this node (its share would start as if the window were spent:
// the owner serves better).
func (r *Router) edgeSpill(t *tenant, owner string) *spill {
	sp := t.spilled()
	if sp == nil || sp.owner != owner || sp.closed.Load() || r.clock() > sp.until.Load() || sp.budget.Degraded() || sp.budget.Fenced() {
		return nil
	}
	if !t.spillable() {
		return nil // given a team or model limits since (a reload): its owner decides them
	}
	sp.arrivals.Add(1)
	return sp
}

// takeSpill takes the call from the spill's budget (sp.mu held shared).
func (r *Router) takeSpill(sp *spill, c *call, again bool) lease.Decision {
	take := sp.budget.Take
	if again {
		take = sp.budget.Retake // a waiting request: asked before
	}
	tk, d := take(r.clock(), int64(c.res.Total))
	if !d.Allowed && d.Renewal != nil {
		timer := time.NewTimer(maxRenewalWait)
		select {
		case <-d.Renewal:
			tk, d = sp.budget.Retake(r.clock(), int64(c.res.Total))
		case <-timer.C:
		}
		timer.Stop()
	}
	if d.Allowed {
		c.spill = budgetTake{b: sp.budget, tk: tk}
	}
	return d
}

// spillDecision is what the rate-limit headers say of a spilled tenant:
// its limits, and what the shared window held at the last grant (every
// node's blocks counted whole: remaining errs low).
func spillDecision(t *tenant, d *lease.Decision, window time.Duration) limiter.Decision {
	out := limiter.Decision{Allowed: d.Allowed, Limited: d.Limited, RetryAfter: d.RetryAfter,
		LimitRequests: t.limits.Requests, LimitTokens: t.limits.Tokens, LimitConcurrency: t.limits.Concurrency,
		ResetRequests: window, ResetTokens: window}
	out.RemainingRequests = max(0, t.limits.Requests-d.Used.Requests)
	out.RemainingTokens = max(0, t.limits.Tokens-d.Used.Tokens)
	if t.limits.Requests <= 0 {
		out.RemainingRequests = -1
	}
	if t.limits.Tokens <= 0 {
		out.RemainingTokens = -1
	}
	return out
}

// RunSpillover measures the tenants' rates and switches them to and from
// spillover until ctx ends.
func (r *Router) RunSpillover(ctx context.Context) {
	tick := time.NewTicker(spillTick)
	defer tick.Stop()
	hot := make(map[string]int)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		st := r.state.Load()
		v := r.view.Load()
		threshold := float64(st.cfg.Limits.SpilloverRPS)
		can := r.canSpill()
		r.spillover.arrivedMu.Lock()
		arrived := r.spillover.arrived
		r.spillover.arrived = nil
		r.spillover.arrivedMu.Unlock()
		for _, t := range arrived {
			t.listed.Store(false) // its next request lists it again
		}
		// Only tenants that had requests can turn hot, and only those
		// with a spill need watching: a node configured with 100 000
		// tenants does not look at each one four times a second.
		tenants := func(yield func(string, *tenant) bool) {
			if r.spillover.count.Load() > 0 {
				for name, t := range st.byName {
					if !yield(name, t) {
						return
					}
				}
				return
			}
			for _, t := range arrived {
				if st.byName[t.name] == t && !yield(t.name, t) {
					return
				}
			}
		}
		for name := range hot {
			if t := st.byName[name]; t == nil || t.arrivals.Load() == 0 {
				delete(hot, name) // no request this tick: cooled
			}
		}
		for name, t := range tenants {
			sp := t.spilled()
			if sp != nil && sp.owner != r.node {
				if u := sp.until.Load(); u == spillAbandoned {
					// abandonSpill is leaving it.
				} else if r.clock() > u {
					go r.leaveSpill(t, sp, "owner_silent")
				} else if v.owner(name) != sp.owner {
					go r.leaveSpill(t, sp, "owner_changed")
				}
				continue
			}
			if sp != nil {
				continue // the owner's spill loop measures it
			}
			n := t.arrivals.Swap(0)
			if !can || t.ownedUntil.Load() != ownedNow || !t.spillable() {
				delete(hot, name)
				continue
			}
			if float64(n)/spillTick.Seconds() < threshold {
				delete(hot, name)
				continue
			}
			if hot[name]++; hot[name] >= spillHot {
				delete(hot, name)
				go r.spillOn(ctx, name, float64(n)/spillTick.Seconds())
			}
		}
	}
}

// noteArrival lists t for the spillover loop's next tick: its first
// request since the last tick.
func (r *Router) noteArrival(t *tenant) {
	r.spillover.arrivedMu.Lock()
	r.spillover.arrived = append(r.spillover.arrived, t)
	r.spillover.arrivedMu.Unlock()
}

// spillOn switches a tenant this node owns to spillover.
func (r *Router) spillOn(ctx context.Context, name string, rate float64) {
	r.reloads.mu.Lock()
	t := r.state.Load().byName[name]
	if t == nil || t.spilled() != nil {
		r.reloads.mu.Unlock()
		return
	}
	sp := r.newSpill(t, r.node, r.clock(), t.limits)
	sp.ready, sp.done = make(chan struct{}), make(chan struct{})
	sp.told = make(map[string]time.Time)
	t.c().spill.Store(sp)
	sp.watchLine()
	r.reloads.mu.Unlock()

	s := t.c().lim.Seal(r.clock())
	sp.budget.Seed(spillSeed(s), slotsOf(s))
	select {
	case <-sp.budget.Seeded():
	case <-time.After(spillSeedWait):
		sp.failed.Store(true)
	}
	if sp.failed.Load() {
		// Unsealed first: a request that sees no spill finds the limiter
		// deciding again. (The limiter and the holder are the same for
		// every struct of the tenant: a reload meanwhile changes nothing.)
		t.c().lim.Unseal()
		t.c().spill.CompareAndSwap(sp, nil)
		t.c().spill.endEpoch(sp.epoch)
		close(sp.ready)
		r.leaser.Drop(sp.key)
		r.spillover.retryAt.Store(r.clock() + int64(spillBackoff))
		r.metrics.Spillover.WithLabelValues("refused").Inc()
		r.log.Warn("spillover", "phase", "refused", "tenant", name, "rate", round1(rate), "reason", "store_unreachable")
		return
	}
	close(sp.ready)
	t.c().queue.Kick() // those waiting are decided on the spill
	r.spillover.owned.Add(1)
	r.metrics.Spillover.WithLabelValues("on").Inc()
	r.log.Info("spillover", "phase", "on", "tenant", name, "rate", round1(rate),
		"threshold", r.state.Load().cfg.Limits.SpilloverRPS, "budget", sp.key)
	r.runOwnerSpill(ctx, name, sp)
}

// spillSeed is a limiter state's requests and tokens as budget uses.
func spillSeed(s limiter.State) []lease.Use {
	var uses []lease.Use
	add := func(b limiter.Bucket, tokens bool) {
		i := len(uses) - 1
		for i >= 0 && uses[i].Bucket > b.Index {
			i--
		}
		if i < 0 || uses[i].Bucket != b.Index {
			uses = append(uses, lease.Use{})
			copy(uses[i+2:], uses[i+1:])
			i++
			uses[i] = lease.Use{Bucket: b.Index}
		}
		if tokens {
			uses[i].Tokens += b.Value
		} else {
			uses[i].Requests += b.Value
		}
	}
	for _, b := range s.Requests.Buckets {
		add(b, false)
	}
	for _, b := range s.Tokens.Buckets {
		add(b, true)
	}
	return uses
}

// slotsOf counts the slots a state holds, this node's and other nodes'.
func slotsOf(s limiter.State) int64 {
	var n int64
	for _, b := range s.Slots.Buckets {
		n += b.Value
	}
	for _, a := range s.Away {
		for _, b := range a.Slots.Buckets {
			n += b.Value
		}
	}
	return n
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

// runOwnerSpill renews the owner's announcement every tick, sums the
// cluster's arrivals, and ends the spill when the tenant cools, Redis stops
// answering, or this node stops owning it.
func (r *Router) runOwnerSpill(ctx context.Context, name string, sp *spill) {
	cool := 0
	tick := time.NewTicker(spillTick)
	defer tick.Stop()
	for {
		st := r.state.Load()
		t := st.byName[name]
		if t == nil || t.spilled() != sp || sp.ending.Load() {
			return // ended elsewhere (a handover), or the tenant is gone
		}
		if ctx.Err() != nil {
			// Stopped without a drain (a crash, to the cluster): the
			// members' spill lapses by itself.
			return
		}
		reason := ""
		switch {
		case r.life.draining.Load():
			reason = "drain"
		case st.cfg.Limits.SpilloverRPS <= 0 || !t.spillable():
			reason = "disabled"
		case t.ownedUntil.Load() != ownedNow:
			reason = "owner_changed"
		case sp.budget.Stats(r.clock()).Degraded:
			reason = "store_unreachable"
		}
		if reason == "" {
			arrivals := t.arrivals.Swap(0) + r.announceSpill(t, sp, true, spillCallTimeout)
			rate := float64(arrivals) / spillTick.Seconds()
			if rate < float64(st.cfg.Limits.SpilloverRPS)/2 {
				cool++
			} else {
				cool = 0
			}
			if cool >= spillCool {
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

// announceSpill tells every other member of the spill (on) or its end
// (off), in parallel, and returns the arrivals they report; sp.told records
// who took an "on", and loses who acknowledged an "off".
func (r *Router) announceSpill(t *tenant, sp *spill, on bool, timeout time.Duration) int64 {
	v := r.view.Load()
	if v == nil {
		return 0
	}
	msg := spillMsg{Tenant: t.name, Owner: sp.owner, Epoch: sp.epoch, On: on, Limits: t.limits, Window: sp.window}
	type answer struct {
		node     string
		ok       bool
		arrivals int64
		sent     time.Time
	}
	var wg sync.WaitGroup
	answers := make(chan answer, len(v.members))
	targets := make(map[string]string)
	for _, m := range v.members {
		if m.Name != r.node && m.Addr != "" {
			targets[m.Name] = m.Addr
		}
	}
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
				if addr := v.addrs[node]; addr != "" {
					targets[node] = addr
				}
			}
		}
	}
	for node, addr := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := time.Now()
			status, body, err := r.peerCall(v, addr, node, spillPath, msg, 1, timeout)
			a := answer{node: node, sent: sent, ok: err == nil && status == fasthttp.StatusOK}
			if a.ok {
				var rep spillReply
				if json.Unmarshal(body, &rep) == nil {
					a.arrivals = rep.Arrivals
				}
			}
			answers <- a
		}()
	}
	wg.Wait()
	close(answers)
	var sum int64
	for a := range answers {
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

// spillOff ends a spill this node owns. The members stop, report what
// they admitted and confirm (announceSpill); then the owner reports its
// own, unseals and decides alone again. A member that did not confirm may
// still admit on its spill until it lapses (spillLease after the last word
// it had): the spill's window in Redis is fenced first — no node is granted
// a block on it any more, so what it held then (every node's uses, its
// blocks outstanding counted whole) bounds the requests and tokens — and
// the owner's limiter counts at least that, and, for the member's calls in
// flight, every slot it does not know of until the lapse.
func (r *Router) spillOff(name string, sp *spill, reason string) {
	r.endSpill(r.state.Load().byName[name], name, sp, reason)
}

// endSpill is spillOff for tenant t, which may be one a reload has just
// removed: its core is kept a while (and put back if a later reload
// restores the tenant), so its limiter must not stay sealed with no spill
// behind it.
func (r *Router) endSpill(t *tenant, name string, sp *spill, reason string) {
	if !sp.ending.CompareAndSwap(false, true) {
		// Ending already (cooled, drained): at most an announcement, a
		// fence and a report away.
		waitClosed(sp.done, spillEndWait)
		return
	}
	defer close(sp.done)
	if t == nil {
		r.spillover.owned.Add(-1)
		return
	}
	timeout := spillCallTimeout
	if reason == "handover" {
		timeout = 100 * time.Millisecond // within the new owner's handoff_timeout
	}
	r.announceSpill(t, sp, false, timeout)
	sp.toldMu.Lock()
	unconfirmed := len(sp.told)
	sp.toldMu.Unlock()
	var used lease.Amount
	var fenceErr error
	if unconfirmed > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		used, fenceErr = r.leaser.Fence(ctx, sp.budget, spillLease+spillTick)
		cancel()
	}
	// What this node admitted on the spill goes into its limiter: most of
	// it now, while requests still go on the spill (a report in flight
	// can take up to deltaTimeout), the rest with the spill closed.
	r.reportFallback(t)
	sp.mu.Lock()
	sp.closed.Store(true)
	r.reportFallback(t)
	if unconfirmed > 0 {
		r.chargeUnreported(t, used, fenceErr)
	}
	// Unsealed first: a request that sees no spill finds the limiter
	// deciding again.
	t.c().lim.Unseal()
	t.c().spill.CompareAndSwap(sp, nil)
	t.c().spill.endEpoch(sp.epoch)
	sp.mu.Unlock()
	t.c().queue.Kick()
	sp.line.Kick() // those waiting for the spill are decided again
	r.leaser.Retire(sp.key)
	r.spillover.owned.Add(-1)
	r.metrics.Spillover.WithLabelValues("off").Inc()
	r.log.Info("spillover", "phase", "off", "tenant", name, "reason", reason,
		"spilled_ms", time.Since(sp.since).Milliseconds(), "unconfirmed", unconfirmed)
}

func waitClosed(c chan struct{}, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-c:
	case <-timer.C:
	}
}

// chargeUnreported makes the limiter count what members that did not
// confirm the spill's end may have admitted and not reported: up to what
// the fenced window held (without an answer from Redis, the rest of the
// window: the limits reopen as it passes), and every free slot until their
// spill has lapsed. A limiter handed over meanwhile gets it as a delta.
func (r *Router) chargeUnreported(t *tenant, used lease.Amount, fenceErr error) {
	now := r.clock()
	cfg := r.state.Load().cfg
	u := t.c().lim.Usage(now)
	if fenceErr != nil {
		used = lease.Amount{Requests: max(0, t.limits.Requests), Tokens: max(0, t.limits.Tokens)}
	}
	d := limiter.Delta{Bucket: now / max(1, int64(cfg.Limits.Window)/limiter.Buckets),
		SlotBucket: now / max(1, int64(cfg.Limits.SlotTTL)/limiter.Buckets),
		Requests:   max(0, used.Requests-u.Requests), Tokens: max(0, used.Tokens-u.Tokens)}
	if c := t.limits.Concurrency; c > 0 {
		d.Slots = max(0, c-u.InFlight)
	}
	if d.Requests > 0 || d.Tokens > 0 || d.Slots > 0 {
		r.sendDeltas(t, "", []limiter.Delta{r.ids.Name(d)}, 0)
		if d.Slots > 0 {
			release := limiter.Delta{Bucket: d.Bucket, SlotBucket: d.SlotBucket, Slots: -d.Slots}
			time.AfterFunc(spillLease+spillTick, func() { r.sendDeltas(t, "", []limiter.Delta{r.ids.Name(release)}, 0) })
		}
	}
	r.log.Warn("spillover", "phase", "unconfirmed", "tenant", t.name, "charged_requests", d.Requests, "charged_tokens", d.Tokens,
		"held_slots", d.Slots, "store_error", errString(fenceErr))
}

// endSpillsMovedBy ends the spills this node owns of tenants the view v
// gives another owner, before v is in force.
func (r *Router) endSpillsMovedBy(v *view) {
	var names []string
	for name, t := range r.state.Load().byName {
		if sp := t.spilled(); sp != nil && sp.owner == r.node {
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
	if r.spillover.owned.Load() == 0 {
		return
	}
	var wg sync.WaitGroup
	for _, name := range names {
		if t := r.state.Load().byName[name]; t == nil || t.spilled() == nil {
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
	t := r.state.Load().byName[name]
	if t == nil {
		return
	}
	sp := t.spilled()
	if sp == nil || sp.owner != r.node {
		return
	}
	if t.ownerSpill(r.node) != sp {
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
	var m spillMsg
	if err := json.Unmarshal(ctx.PostBody(), &m); err != nil || m.Tenant == "" || m.Owner != info.From {
		fail(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "invalid_json", "Malformed spillover announcement.")
		return
	}
	t := r.state.Load().byName[m.Tenant]
	if t == nil {
		fail(ctx, fasthttp.StatusNotFound, "invalid_request_error", "unknown_tenant", "No tenant named "+m.Tenant+".")
		return
	}
	cur := t.spilled()
	if !m.On {
		var arrivals int64
		delivered := true
		if cur != nil && cur.owner == m.Owner && cur.epoch == m.Epoch {
			arrivals = cur.arrivals.Load()
			delivered = r.leaveSpill(t, cur, "owner_ended")
		} else if c := t.peek(); c != nil && !c.fb.Delivered() {
			// Left already (abandoned, lapsed), and what it admitted on
			// the spill or its share since has not reached the owner: the
			// owner must not take this as confirmed.
			r.reportFallback(t)
			delivered = c.fb.Delivered()
		}
		if !delivered {
			fail(ctx, fasthttp.StatusServiceUnavailable, "server_error", "ledger_undelivered", "This node could not report what it admitted.")
			return
		}
		writeJSON(ctx, fasthttp.StatusOK, spillReply{Arrivals: arrivals})
		return
	}
	refuse := func(code, msg string) {
		fail(ctx, fasthttp.StatusConflict, "invalid_request_error", code, msg)
	}
	switch {
	case r.view.Load().owner(m.Tenant) != m.Owner || m.Owner == r.node:
		// This node's ring names another owner: it forwards there.
		refuse("not_owner", "This node's ring names another owner.")
		return
	case m.Epoch <= t.c().spill.ended.Load():
		// Ended here already (this node left it, or its "off" came
		// first): a late or repeated "on" must not start it again; the
		// requests go to the owner.
		refuse("spill_ended", "This node left that spillover.")
		return
	case m.Window != r.state.Load().cfg.Limits.Window:
		refuse("window_differs", "This node's limits.window differs from the owner's.")
		return
	case cur != nil && cur.owner == r.node:
		refuse("busy", "This node's own spillover of the tenant is still ending.")
		return
	case t.falling() || !t.c().fb.Delivered() || cur != nil && cur.until.Load() == spillAbandoned:
		// This node enforces its fallback share, or the owner has not
		// been told yet what the share admitted (which charges it to the
		// budget): the budget's window would not count it.
		refuse("in_fallback", "This node serves the tenant on its fallback share until the owner has its admissions.")
		return
	}
	if cur == nil || cur.owner != m.Owner || cur.epoch != m.Epoch {
		if cur != nil {
			r.leaveSpill(t, cur, "replaced")
		}
		// Under reloads.mu: a reload keeps the budgets of the spills it
		// sees, and must see this one.
		r.reloads.mu.Lock()
		sp := r.newSpill(t, m.Owner, m.Epoch, m.Limits)
		sp.done = make(chan struct{})
		sp.until.Store(r.clock() + int64(spillLease))
		if !t.c().spill.CompareAndSwap(nil, sp) {
			r.reloads.mu.Unlock()
			r.leaser.Drop(sp.key)
			refuse("busy", "Another spillover change is in progress.")
			return
		}
		sp.watchLine()
		r.reloads.mu.Unlock()
		cur = sp
	} else if cur.budget.Stats(r.clock()).Limits != m.Limits {
		cur.budget.SetLimits(m.Limits, lease.Share) // the owner reloaded
	}
	cur.until.Store(r.clock() + int64(spillLease))
	writeJSON(ctx, fasthttp.StatusOK, spillReply{Arrivals: cur.arrivals.Swap(0)})
}

// leaveSpill stops serving a spill this node does not own: from now on the
// tenant's requests go to its owner; what this node admitted on the spill
// is reported, and its blocks given back. It reports whether the report
// reached the node counting the tenant.
func (r *Router) leaveSpill(t *tenant, sp *spill, reason string) bool {
	sp.mu.Lock()
	was := sp.closed.Swap(true)
	if reason != "owner_unreachable" {
		// Never again for this epoch. An abandoned spill may be joined
		// again if its owner turns out alive (serveSpill).
		t.c().spill.endEpoch(sp.epoch)
	}
	t.c().spill.leftAt.Store(r.clock()) // before the spill is gone: answersMissSpill sees one or the other
	t.c().spill.CompareAndSwap(sp, nil)
	sp.mu.Unlock()
	sp.line.Kick() // those waiting for the spill are decided again
	r.reportFallback(t)
	delivered := t.c().fb.Delivered()
	if !was && (!delivered || reason == "owner_silent" || reason == "owner_unreachable") {
		// The owner may be gone: the snapshot a fallback share would be
		// seeded with does not hold what this node admitted on the spill
		// lately. The share counts it itself.
		chargeMirror(t.c().fb.Share(), sp.mirror, r.clock())
	}
	if !was {
		r.leaser.Retire(sp.key) // its slots held while its calls run
		if reason != "owner_ended" {
			r.metrics.Spillover.WithLabelValues("left").Inc()
			r.log.Info("spillover", "phase", "left", "tenant", t.name, "owner", sp.owner, "reason", reason)
		}
		if sp.done != nil {
			close(sp.done)
		}
	}
	return delivered
}

// spillCarriedEnded brings into a spill this node owns what ds report of
// calls admitted outside it (a call carries its spill's epoch; these have
// another, or none): one a fallback share admitted and reported only after
// the seal is charged to the budget, its slot carried; the end of a carried
// call frees its slot, and what it settled above its reservation is
// charged.
func (r *Router) spillCarriedEnded(t *tenant, ds []limiter.Delta) {
	sp := t.spilled()
	if sp == nil || sp.owner != r.node {
		return
	}
	now := r.clock()
	for _, d := range ds {
		if d.Epoch == sp.epoch && d.Epoch != 0 {
			continue
		}
		if d.Slots < 0 {
			sp.budget.ReleaseCarried()
		}
		if a := (lease.Amount{Requests: max(0, d.Requests), Tokens: max(0, d.Tokens)}); a.Requests > 0 || a.Tokens > 0 {
			sp.budget.Charge(now, lease.Use{Bucket: d.Bucket, Amount: a}, d.Slots > 0)
		}
	}
}

// chargeMirror charges lim with the requests and tokens a spill's mirror
// holds, in their buckets.
func chargeMirror(lim, mirror *limiter.Tenant, now int64) {
	s := mirror.Export(now)
	by := make(map[int64]*limiter.Delta)
	at := func(b int64) *limiter.Delta {
		if by[b] == nil {
			by[b] = &limiter.Delta{Bucket: b}
		}
		return by[b]
	}
	for _, b := range s.Requests.Buckets {
		at(b.Index).Requests += b.Value
	}
	for _, b := range s.Tokens.Buckets {
		at(b.Index).Tokens += b.Value
	}
	for _, d := range by {
		lim.Apply(now, *d)
	}
}

// spillView is the tenant's spillover as /tenants/{name} shows it.
func (r *Router) spillView(t *tenant) status.Spill {
	sp := t.spilled()
	if sp == nil || sp.failed.Load() || sp.closed.Load() {
		return status.Spill{Mode: "owner"}
	}
	s := sp.budget.Stats(r.clock())
	return status.Spill{Mode: "spill", Owner: sp.owner, Budget: sp.key, SinceMs: time.Since(sp.since).Milliseconds(),
		Blocks: s.Blocks, LeftReq: s.Left.Requests, LeftTok: s.Left.Tokens, SlotsHeld: s.SlotsHeld, SlotsUsed: s.SlotsUsed,
		WindowReq: s.Used.Requests, WindowTok: s.Used.Tokens, Degraded: s.Degraded}
}
