package lease

import (
	"context"
	"time"
)

// maintain does a budget's store work at now: give back spent and expired
// blocks, report what the share admitted once the store answers again,
// take a new block when demand needs one, renew the slots. It stops at the
// first call that fails (the store is down: the next round tries again).
// It makes the calls one by one, outside the budget's lock.
func (b *Budget) maintain(ctx context.Context, st Store, node string, now int64) {
	defer b.tellRoom()
	if st == nil {
		b.goStoreless(now)
		return
	}
	rd := &round{b: b, ctx: ctx, st: st, node: node, now: now, keyTTL: 2*b.cfg.Window + b.cfg.LeaseFor}
	defer rd.wakeWaiters()
	steps := [...]func() bool{rd.owedHistory, rd.seed, rd.endOutage, rd.giveBack, rd.probe,
		rd.externalUses, rd.exchange, rd.grant, rd.slots}
	for _, step := range steps {
		if !step() {
			return
		}
	}
}

// goStoreless makes a budget with no store degraded for good: it admits
// on its share.
func (b *Budget) goStoreless(now int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.storeless = true
	b.outage.none.Store(true)
	if b.outage.since == 0 {
		b.outage.since = now
		b.outage.down.Store(true)
		b.line.roomed = true
	}
	b.dropExpired(now)
}

// round is one maintain: its steps, in order, each false when a store call
// failed and the round ends.
type round struct {
	b      *Budget
	ctx    context.Context
	st     Store
	node   string
	now    int64
	keyTTL time.Duration
	// renewals are closed when the round ends: those waiting for a grant
	// or a slot try again once both are done.
	renewals []chan struct{}
}

// wakeWaiters closes the renewals the round took.
func (rd *round) wakeWaiters() {
	for _, ch := range rd.renewals {
		close(ch)
	}
}

// takeRenewal takes the budget's renewal channel, to close when the round
// ends; b.mu is held.
func (rd *round) takeRenewal() {
	if ch := rd.b.grant.renewal; ch != nil {
		rd.renewals = append(rd.renewals, ch)
		rd.b.grant.renewal = nil
	}
}

// failed notes a failed store call; it reports false.
func (rd *round) failed() bool {
	rd.b.mu.Lock()
	rd.b.storeFailed(rd.now)
	rd.b.mu.Unlock()
	return false
}

// give makes a Return; a window the store made anew (it lost its data: a
// Redis restarted without persistence) is told what this node used in the
// last window first, so it does not grant it again.
func (rd *round) give(r ReturnRequest) bool {
	b := rd.b
	r.Now, r.KeyTTL = rd.now/b.width, rd.keyTTL
	gen, err := rd.st.Return(rd.ctx, b.windowKey, r)
	if err != nil {
		return rd.failed()
	}
	return !b.newGen(rd.now, gen) || b.reportHistory(rd.ctx, rd.st, rd.now, rd.keyTTL)
}

// giveNow returns uses charged at now's bucket; on failure they are kept
// for the next round by keep.
func (rd *round) giveNow(used []Use, keep func([]Use)) bool {
	if rd.give(ReturnRequest{Expires: rd.now / rd.b.width, Used: used}) {
		return true
	}
	rd.b.mu.Lock()
	keep(used)
	rd.b.mu.Unlock()
	return false
}

// owedHistory tells a window made anew this node's part of the last one,
// when an earlier round could not.
func (rd *round) owedHistory() bool {
	rd.b.mu.Lock()
	owed := rd.b.history.owed
	rd.b.mu.Unlock()
	return !owed || rd.b.reportHistory(rd.ctx, rd.st, rd.now, rd.keyTTL)
}

func (rd *round) seed() bool { return rd.b.tellSeed(rd.ctx, rd.st, rd.node, rd.now, rd.give) }

// endOutage reports what the share admitted during an outage: the window
// in the store must hold it before anything more is granted.
func (rd *round) endOutage() bool {
	b, now := rd.b, rd.now
	b.mu.Lock()
	wasDown := b.outage.since != 0
	report := b.outage.shareUses
	b.outage.shareUses = nil
	b.mu.Unlock()
	if !wasDown {
		return true
	}
	if !rd.giveNow(report, func(u []Use) { b.outage.shareUses = append(u, b.outage.shareUses...) }) {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stats.degradedNs += now - b.outage.since
	// What the other nodes' shares admitted reaches the store when they
	// reach it: no grant before they had the time to, also on a node that
	// had no share of its own (no demand meanwhile: its demand may rise
	// first, before theirs is told: 450 requests for 300 otherwise). open
	// and closed admit on no share: nothing to wait for.
	if b.cfg.OnStoreDown == Share {
		b.grant.retryAt = max(b.grant.retryAt, now+int64(rebuildWait))
	}
	// Admissions on the share since the report are reported with the
	// next round (the store answers again: the share is over).
	b.late = append(b.late, b.outage.shareUses...)
	b.outage.since, b.outage.share, b.outage.shareUses = 0, nil, nil
	b.line.roomed = true
	b.outage.down.Store(false)
	return true
}

// giveBack returns expired and spent blocks, with the uses reported late.
func (rd *round) giveBack() bool {
	b, now := rd.b, rd.now
	b.mu.Lock()
	var back []*block
	keep := b.blocks[:0]
	for _, blk := range b.blocks {
		if now > blk.expires || b.spent(blk) || b.retired {
			blk.returned = true
			back = append(back, blk)
		} else {
			keep = append(keep, blk)
		}
	}
	b.blocks = keep
	late := b.late
	b.late = nil
	b.mu.Unlock()
	keepLate := func(u []Use) { b.late = append(u, b.late...) }
	for i, blk := range back {
		r := ReturnRequest{Gen: blk.gen, Expires: blk.bucket, Granted: blk.granted, Used: blk.uses}
		if i == 0 {
			r.Used = append(r.Used, late...)
		}
		if !rd.give(r) {
			if i == 0 {
				b.mu.Lock()
				keepLate(late)
				b.mu.Unlock()
			}
			return false // the rest stay charged: conservative
		}
		b.mu.Lock()
		b.stats.Returns++
		b.mu.Unlock()
	}
	return len(back) > 0 || len(late) == 0 || rd.giveNow(late, keepLate)
}

// probe: a node that used the window lately looks at its generation often
// enough to tell a Redis that lost it its part within rebuildWait, even
// when it needs no store call otherwise.
func (rd *round) probe() bool {
	b := rd.b
	b.mu.Lock()
	b.pruneHistory(rd.now)
	probe := (len(b.history.uses) > 0 || len(b.blocks) > 0) && rd.now-b.history.contact >= int64(genProbe)
	b.mu.Unlock()
	return !probe || rd.give(ReturnRequest{Expires: rd.now / b.width})
}

// externalUses charges what the provider said others used.
func (rd *round) externalUses() bool {
	b := rd.b
	b.mu.Lock()
	ext := b.provider.externalUses
	b.provider.externalUses = nil
	b.mu.Unlock()
	return len(ext) == 0 || rd.giveNow(ext, func(u []Use) { b.provider.externalUses = append(u, b.provider.externalUses...) })
}

// exchange tells this node's demand and divides the budget (fair.go).
func (rd *round) exchange() bool {
	rd.b.mu.Lock()
	flows := rd.b.line.flows
	rd.b.mu.Unlock()
	rd.b.exchange(rd.ctx, rd.st, rd.node, rd.now, flows)
	return true
}

// grant asks for a new block when demand needs one, or, when this node's
// part of the window is used, reads the window (peekUsed).
func (rd *round) grant() bool {
	b, now := rd.b, rd.now
	b.mu.Lock()
	want, least, ok := b.blockWant(now)
	if !ok {
		peek := b.fair.peek
		b.fair.peek = false
		b.mu.Unlock()
		if peek {
			b.peekUsed(rd.ctx, rd.st, now, rd.keyTTL)
		}
		return true
	}
	expires := now + int64(b.cfg.LeaseFor)
	if b.grant.saturated {
		// Short blocks while the budget is in demand: what a node does
		// not use goes back soon.
		expires = now + min(int64(b.cfg.LeaseFor), 4*b.width)
	}
	b.grant.renewing = true
	el := b.limitsLocked()
	b.mu.Unlock()
	reply, err := rd.st.Grant(rd.ctx, b.windowKey, GrantRequest{Now: now / b.width, Expires: expires / b.width,
		Limit: Amount{el.Requests, el.Tokens}, Want: want, Min: least, KeyTTL: rd.keyTTL})
	b.mu.Lock()
	b.grant.renewing = false
	rd.takeRenewal()
	if err != nil {
		b.storeFailed(now)
		b.mu.Unlock()
		return false
	}
	g, usable, fresh := b.granted(now, expires, want, reply)
	b.mu.Unlock()
	back := ReturnRequest{Gen: reply.Gen, Expires: expires / b.width, Granted: g}
	some := g.Requests > 0 || g.Tokens > 0
	switch {
	case fresh:
		// Granted on a window that does not know this node's last one:
		// back it goes, the history is told, and no grant is asked for
		// until the other nodes had time to tell theirs.
		return (!some || rd.give(back)) && b.reportHistory(rd.ctx, rd.st, now, rd.keyTTL)
	case !usable && some:
		return rd.give(back) // half a block is no block: back at once
	}
	return true
}

// granted takes a grant's reply: a new block when it is usable, else when
// to ask again. fresh: the window was made anew. b.mu is held.
func (b *Budget) granted(now, expires int64, want Amount, reply GrantReply) (g Amount, usable, fresh bool) {
	b.stats.Grants++
	b.stats.Used = reply.Used
	if reply.Fenced {
		b.fenced.Store(true)
	}
	b.provider.external = Amount{} // the window holds what was sent of it now
	g = reply.Granted
	fresh = b.newGenLocked(now, reply.Gen)
	// A grant to a budget replaced meanwhile (a reload while the round
	// was under way) goes back at once: nothing takes from it, and its
	// give-back is done (a block held so would keep a reload back to the
	// old window at nothing for a window).
	usable = (want.Requests == 0 || g.Requests > 0) && (want.Tokens == 0 || g.Tokens > 0) && !fresh && b.next == nil
	b.grant.saturated = g.Requests < want.Requests || g.Tokens < want.Tokens
	switch {
	case usable:
		b.grant.needed = Amount{}
		b.blocks = append(b.blocks, &block{gen: reply.Gen, expires: expires, bucket: expires / b.width, granted: g, left: g})
		b.line.roomed = true
		b.grant.retryAt = 0
	case !fresh:
		b.stats.Empty++
		// No room until the oldest bucket leaves the window, or a node
		// gives back what it did not use (a quarter of a block's life at
		// most, for the store to learn of it).
		b.grant.retryAt = min((reply.Oldest+Span+1)*b.width, now+int64(b.cfg.LeaseFor)/4)
	}
	return g, usable, fresh
}

// slots renews this node's hold on the provider's concurrency when it is
// due, or when the calls running, refused or divided call for another.
func (rd *round) slots() bool {
	b := rd.b
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.cfg.Limits.Concurrency
	if c <= 0 {
		return true
	}
	want, renew := b.slotsWanted(rd.now, c)
	if !renew {
		return true
	}
	b.slots.refused = 0
	b.mu.Unlock()
	held, err := rd.st.HoldSlots(rd.ctx, b.cfg.Key, rd.node, want, c, rd.now, b.cfg.SlotTTL)
	b.mu.Lock()
	rd.takeRenewal()
	if err != nil {
		// The store may have taken a shrink whose answer was lost: hold
		// to the smaller of the two.
		b.slots.held = min(b.slots.held, want)
		b.storeFailed(rd.now)
		return false
	}
	b.line.roomed = b.line.roomed || held > b.slots.held
	b.slots.held, b.slots.until = held, rd.now+int64(b.cfg.SlotTTL)
	return true
}

// slotsWanted is the slots to hold, and whether to ask the store for them
// now; b.mu is held.
func (b *Budget) slotsWanted(now, limit int64) (want int64, renew bool) {
	// Room for one more call beside those running, but none on a node
	// nobody asks: an idle node's slot is one a busy one lacks.
	headroom := max(1, b.slots.used/4, b.slots.refused)
	if b.roll(now); b.slots.used == 0 && b.slots.refused == 0 && b.asked.Requests+b.askedPrev.Requests == 0 {
		headroom = 0
	}
	// Never fewer than the calls running: a slot given up under a call
	// still at the provider would be another node's at once.
	part := b.slotPartLocked(limit)
	want = min(limit, max(b.slots.used, min(part, b.slots.used+headroom)))
	renew = now >= b.slots.until-int64(b.cfg.SlotTTL)*2/3 || b.slots.refused > 0 && b.slots.held < part ||
		b.slots.used >= b.slots.held && b.slots.held < part || b.slots.held > want+headroom || b.slots.held > max(part, b.slots.used)
	return want, renew
}
