package lease

import (
	"context"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/ringgate/ringgate/fair"
	"github.com/ringgate/ringgate/limiter"
)

// A budget is divided among the tenants that want it, cluster-wide, max-min
// fair by weight (package fair), and not by which node asked first. Each
// node counts what its flows (a tenant in a priority band) ask of the
// budget and how many of their requests wait in its line, and reports it
// to the store every reportEvery while it has demand (Demand): per
// dimension, each flow's weight and what it would use in a window (or at
// once, for slots). The store answers with every node's live report, and
// the node divides the limit among all the flows it names: its own flows'
// parts, plus its part of what nobody wants, are its share. Its grants
// never take its own charge in the store's window past that share, and it
// admits no call past its part of the concurrency (the slots of calls
// running past it are held until they end: another node would fill them
// at once). Within a node the line's start-time fair queueing shares the
// node's part among its flows by the same weights, so each tenant gets its
// part wherever the ring placed it.
//
// A node that has not yet had an answer to its report (just started)
// leases as the store allows. The store is the arbiter: parts divided from
// reports of different ages can add up to more than the limit for a
// moment, and the store grants no more than the limit.

// Flow is who a request is taken for: its tenant (Key), its priority band
// (0 interactive, 1 batch) and its weight on each dimension.
type Flow struct {
	Key    string
	Band   int
	Weight Weights
}

// Weights are a flow's weights on the budget's dimensions.
type Weights struct{ Requests, Tokens, Concurrency float64 }

// Backlog reports, for each flow, how many of its requests wait in the
// budget's line: fn is called once per flow that has waiters.
type Backlog func(fn func(key string, band, waiting int))

type flowKey struct {
	key  string
	band int
}

// flowState is what a node knows of one flow's demand on a budget: what it
// asked over the last block's life or two, and its calls in flight.
type flowState struct {
	Flow
	demand
	inflight int64
	// waited: requests of it waited in the line at the last report.
	waited bool
}

// fairState is what a node's budget keeps for the division: its flows'
// demand, and its part from the last reports.
type fairState struct {
	flows         map[flowKey]*flowState
	newFlow       bool    // a flow appeared since the last report
	holdNs        float64 // how long a call holds a slot, on average
	reportedAt    int64
	reportedEmpty bool // the last report said nothing is wanted
	div           division
	// peek: this node asked for no grant because its part was used, and
	// it last read the store's window at peekedAt.
	peek     bool
	peekedAt int64
}

// division is this node's part of the budget, from the last reports.
type division struct {
	known bool
	at    int64  // when it was made
	rate  Amount // this node's part of the requests and tokens of a window
	slots int64  // this node's part of the concurrency
	nodes int    // nodes whose reports it was made from
	// Demand is what this node reported: per window, and slots.
	demand      Amount
	demandSlots int64
}

// reportEvery is how often a node with demand tells the store of it: a
// quarter of a block's life, within 20 ms and 1 s.
func (b *Budget) reportEvery() int64 {
	return min(max(int64(b.cfg.LeaseFor)/4, int64(20*time.Millisecond)), int64(time.Second))
}

// reportTTL is how long a report counts unless renewed: a node that
// stopped reporting (gone, cut off) holds no part for long.
func (b *Budget) reportTTL() time.Duration {
	return time.Duration(4*b.reportEvery()) + 500*time.Millisecond
}

// flowLocked is f's state, made on first use; b.mu is held.
func (b *Budget) flowLocked(f *Flow) *flowState {
	k := flowKey{f.Key, f.Band}
	fs := b.fair.flows[k]
	if fs == nil {
		if b.fair.flows == nil {
			b.fair.flows = make(map[flowKey]*flowState)
		}
		fs = &flowState{Flow: *f}
		b.fair.flows[k] = fs
		b.fair.newFlow = true
	}
	fs.Weight = f.Weight // a reload may change a tenant's limits
	return fs
}

// flowAsked counts a request of tokens in f's demand; b.mu is held.
func (b *Budget) flowAsked(fs *flowState, now, tokens int64) {
	fs.add(now, int64(b.cfg.LeaseFor), tokens)
}

// unask takes back a request counted in fs's demand that was not sent
// after all (another limit refused it): that limit, not this budget,
// bounds the flow, and its part here would be left unused.
func (fs *flowState) unask(tokens int64) { fs.sub(tokens) }

// holdTime notes how long a slot was held, for the slots a flow's rate
// keeps busy; b.mu is held.
func (b *Budget) holdTime(d int64) {
	if d <= 0 {
		return
	}
	if b.fair.holdNs == 0 {
		b.fair.holdNs = float64(d)
		return
	}
	b.fair.holdNs += (float64(d) - b.fair.holdNs) / 16
}

// wantsLocked is this node's demand per dimension, a want a flow, from its
// flows and the line's backlog (by flow); idle flows are forgotten. b.mu
// is held.
func (b *Budget) wantsLocked(now int64, backlog map[flowKey]int) [3][]fair.Want {
	var out [3][]fair.Want
	l := b.limitsLocked()
	for d, limit := range [3]int64{l.Requests, l.Tokens, l.Concurrency} {
		if limit > 0 {
			out[d] = make([]fair.Want, 0, len(b.fair.flows))
		}
	}
	for k, fs := range b.fair.flows {
		var n int64
		if len(backlog) > 0 {
			n = int64(backlog[k])
		}
		// What it asks a window, from the last block's life or two: a
		// flow that stops asking soon wants nothing.
		rate := fs.rate(now, int64(b.cfg.LeaseFor))
		if rate.Requests == 0 && n == 0 && fs.inflight <= 0 {
			delete(b.fair.flows, k)
			continue
		}
		want := [3]float64{rate.Requests * float64(b.cfg.Window), rate.Tokens * float64(b.cfg.Window),
			// The slots its rate keeps busy for as long as a call holds
			// one, never fewer than it fills, and one at least when it
			// asked lately, though none of its calls ended here yet to
			// tell how long one holds it (a node just started).
			max(rate.Requests*b.fair.holdNs, float64(fs.inflight), min(1, rate.Requests*float64(b.cfg.Window)))}
		if n > 0 && fs.waited {
			// Requests of it have waited for the budget at two reports
			// in a row: it gets less than it wants, whatever its rate
			// says (clients that wait for an answer before they ask
			// again ask no faster than they are let in), so it wants all
			// there is, and its part is its weight's. One that waits a
			// moment (its node's other tenants took the part first: the
			// line lets it in next) is wanting what its rate says.
			want = [3]float64{float64(l.Requests), float64(l.Tokens), float64(l.Concurrency)}
		}
		fs.waited = n > 0
		for d, w := range [3]float64{fs.Weight.Requests, fs.Weight.Tokens, fs.Weight.Concurrency} {
			if out[d] != nil {
				out[d] = append(out[d], fair.Want{Band: fs.Band, Weight: w, Amount: want[d]})
			}
		}
	}
	return out
}

// rated is what was asked per nanosecond.
type rated struct{ Requests, Tokens float64 }

// reportGroups bounds a report: at most this many groups a band and
// dimension (fair.Merge).
const reportGroups = 16

// exchange reports this node's demand when it is due and divides the
// budget from every node's report. Only the counters are read under the
// budget's lock: merging, decoding and dividing run outside it, off every
// request's way.
func (b *Budget) exchange(ctx context.Context, st Store, node string, now int64, backlog Backlog) {
	waiting := map[flowKey]int{}
	if backlog != nil {
		backlog(func(key string, band, n int) { waiting[flowKey{key, band}] += n })
	}
	b.mu.Lock()
	due := now-b.fair.reportedAt >= b.reportEvery() || b.fair.newFlow && now-b.fair.reportedAt >= b.width
	if !due || b.retired || b.next != nil {
		b.mu.Unlock()
		return
	}
	wants := b.wantsLocked(now, waiting)
	if len(wants[0])+len(wants[1])+len(wants[2]) == 0 {
		// No flow of its own wants it (or none is counted: a spill's
		// budget is one tenant's): nothing to divide for this node.
		b.fair.div = division{}
		told := b.fair.reportedEmpty || b.fair.reportedAt == 0
		b.mu.Unlock()
		if !told {
			b.tellEmpty(ctx, st, node, now)
		}
		return
	}
	b.fair.newFlow = false
	l, epoch := b.limitsLocked(), now/max(4*int64(b.cfg.LeaseFor), 1)
	b.mu.Unlock()
	for d := range wants {
		wants[d] = fair.Merge(wants[d], reportGroups)
	}
	reports, err := st.Demand(ctx, b.cfg.Key, node, encodeReport(wants), now, b.reportTTL())
	if err != nil {
		// The division stays as it was until the next report: the
		// leases' own calls say whether the store is down (a report
		// that failed alone would make a node go without grants for a
		// second after a failover it otherwise rode out on its blocks).
		b.mu.Lock()
		b.stats.StoreErrors++
		b.fair.reportedAt = now
		b.mu.Unlock()
		return
	}
	div := b.divide(now, node, l, epoch, wants, reports)
	b.mu.Lock()
	b.fair.reportedAt, b.fair.reportedEmpty, b.fair.div = now, false, div
	b.mu.Unlock()
}

// tellEmpty tells the store this node wants nothing of the budget any more
// (its tenants stopped asking, or it drains), so the others' parts grow at
// once rather than when its last report lapses.
func (b *Budget) tellEmpty(ctx context.Context, st Store, node string, now int64) bool {
	if _, err := st.Demand(ctx, b.cfg.Key, node, encodeReport([3][]fair.Want{}), now, b.reportTTL()); err != nil {
		b.mu.Lock()
		b.stats.StoreErrors++
		b.fair.reportedAt = now // tried again with the next report; meanwhile it lapses
		b.mu.Unlock()
		return false
	}
	b.mu.Lock()
	b.fair.reportedAt, b.fair.reportedEmpty = now, true
	b.mu.Unlock()
	return true
}

// divide divides the budget, of limits l, among every node's flows and
// returns this node's part; own is this node's report, fresher than the
// store's copy of it. The rounding of parts to whole requests and slots
// turns with the epoch, the same for every node, so that a fraction is not
// always rounded down on the same node.
func (b *Budget) divide(now int64, node string, l limiter.Limits, epoch int64, own [3][]fair.Want, reports map[string][]byte) division {
	all := map[string][3][]fair.Want{node: own}
	for n, r := range reports {
		if n == node {
			continue
		}
		if w, ok := decodeReport(r); ok {
			all[n] = w
		}
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	slices.Sort(names)
	me := slices.Index(names, node)
	var parts [3]int64
	for d, limit := range [3]int64{l.Requests, l.Tokens, l.Concurrency} {
		if limit > 0 {
			parts[d] = divideDimension(limit, b.cfg.BandFloor, names, all, d, offset(b.cfg.Key, d, epoch))[me]
		}
	}
	var demand [3]float64
	for d := range own {
		for _, w := range own[d] {
			demand[d] += w.Amount
		}
	}
	return division{known: true, at: now, rate: Amount{parts[0], parts[1]}, slots: parts[2], nodes: len(names),
		demand: Amount{int64(demand[0]), int64(demand[1])}, demandSlots: int64(math.Ceil(demand[2]))}
}

// divideDimension divides limit among the flows of every node (named in
// order) on dimension d, and rounds each node's part to a whole number
// (systematic rounding at offset u in [0, 1): the parts add up to limit
// when the flows want it all, each is its share rounded up or down).
func divideDimension(limit int64, floor float64, names []string, all map[string][3][]fair.Want, d int, u float64) []int64 {
	var every []fair.Want
	for _, n := range names {
		every = append(every, all[n][d]...)
	}
	div := fair.Divide(float64(limit), floor, every)
	out := make([]int64, len(names))
	var cum float64
	prev := int64(0)
	for i, n := range names {
		var share, weight float64
		for _, w := range all[n][d] {
			share += div.Share(w)
			weight += w.Weight
		}
		cum += share + div.SpareFor(weight)
		if r := math.Round(cum); math.Abs(cum-r) < 1e-6 {
			cum = r
		}
		next := min(int64(math.Ceil(cum-u)), limit)
		out[i] = max(0, next-prev)
		prev = max(prev, next)
	}
	return out
}

// offset is the systematic rounding's offset for a budget's dimension in
// an epoch: the same on every node.
func offset(key string, d int, epoch int64) float64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	_, _ = h.Write([]byte(strconv.FormatInt(epoch*3+int64(d), 10)))
	return float64(h.Sum64()>>11) / (1 << 53)
}

// capLocked lowers a grant's want to what this node's part leaves of the
// window, beside what it already holds there: its admissions in the window
// and what its live blocks have left. A request with more tokens than the
// whole part may still go once the node holds none in the window. It
// reports false when nothing worth a grant is left. b.mu is held.
func (b *Budget) capLocked(now int64, want *Amount, least Amount) bool {
	if !b.fair.div.known {
		return true
	}
	b.pruneHistory(now)
	var mine Amount
	for _, u := range b.history.uses {
		mine.Requests += u.Requests
		mine.Tokens += u.Tokens
	}
	for _, blk := range b.blocks {
		if !blk.returned && now <= blk.expires {
			mine.Requests += max(0, blk.left.Requests)
			mine.Tokens += max(0, blk.left.Tokens)
		}
	}
	part := b.fair.div.rate
	if mine.Tokens == 0 && part.Tokens > 0 {
		part.Tokens = max(part.Tokens, b.grant.needed.Tokens)
	}
	l := b.limitsLocked()
	if l.Requests > 0 {
		want.Requests = min(want.Requests, max(0, part.Requests-mine.Requests))
	}
	if l.Tokens > 0 {
		want.Tokens = min(want.Tokens, max(0, part.Tokens-mine.Tokens))
	}
	return !(l.Requests > 0 && want.Requests < max(1, least.Requests) || l.Tokens > 0 && want.Tokens < max(1, least.Tokens))
}

// partFreesAt is when this node's oldest charge leaves the window (its
// part then has room again), or the next report, whichever is first; b.mu
// is held.
func (b *Budget) partFreesAt(now int64) int64 {
	next := b.fair.reportedAt + b.reportEvery()
	if len(b.history.uses) > 0 {
		next = min(next, (b.history.uses[0].Bucket+Span+1)*b.width)
	}
	return max(next, now+1)
}

// peekUsed reads what the store's window holds, without a grant. A node
// whose part is used asks for no block, so what it last heard of the
// window dates from its last grant, before the other nodes' since; the
// provider's remaining weighed against that figure (Observe) charges the
// others' grants again as used elsewhere, and the next window opens late
// by as much. At most once a report.
func (b *Budget) peekUsed(ctx context.Context, st Store, now int64, keyTTL time.Duration) {
	b.mu.Lock()
	b.fair.peekedAt = now
	el := b.limitsLocked()
	b.mu.Unlock()
	reply, err := st.Grant(ctx, b.windowKey, GrantRequest{Now: now / b.width, Expires: now / b.width,
		Limit: Amount{el.Requests, el.Tokens}, KeyTTL: keyTTL})
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.stats.StoreErrors++ // the leases' own calls say whether the store is down
		return
	}
	if reply.Gen != b.history.gen {
		return // a window made anew: the next round deals with it
	}
	b.stats.Used = reply.Used
	// b.provider.external is what the provider said others used that the
	// window does not hold: what is still to be sent (externalUses), the rest
	// went with this round before the read.
	b.provider.external = Amount{}
	for _, u := range b.provider.externalUses {
		b.provider.external.Requests += u.Requests
		b.provider.external.Tokens += u.Tokens
	}
}

// slotPartLocked is the slots this node may hold: its part, once divided.
func (b *Budget) slotPartLocked(limit int64) int64 {
	if !b.fair.div.known {
		return limit
	}
	return min(limit, b.fair.div.slots)
}
