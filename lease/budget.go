package lease

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringgate/ringgate/limiter"
)

// OnStoreDown is what a budget does once the store stopped answering and
// its blocks are spent.
type OnStoreDown uint8

const (
	Share  OnStoreDown = iota // a strict local share: the limit / live members
	Open                      // admit without the provider limit
	Closed                    // refuse
)

// Config is one budget: a provider's limits for an upstream, or for one of
// its models.
type Config struct {
	Key    string         // the store key, unique in the cluster
	Limits limiter.Limits // per window; 0: none on that dimension
	Window time.Duration
	// Settles: the provider corrects a request's token charge to its
	// usage when it ends (Anthropic); without it the charge made at the
	// start stands (OpenAI).
	Settles     bool
	OnStoreDown OnStoreDown
	LeaseFor    time.Duration // a block's life; default Window/8
	SlotTTL     time.Duration // a slot holding's life unless renewed; default 3s
	// BandFloor is the least part of the limit batch flows get while
	// they want it, however much interactive ones want (fair.Divide).
	BandFloor float64
}

func (c *Config) defaults() {
	if c.LeaseFor <= 0 {
		c.LeaseFor = c.Window / 8
	}
	if c.SlotTTL <= 0 {
		c.SlotTTL = 3 * time.Second
	}
}

// renewBelow: a block is renewed when less than this fraction of its grant
// is left.
const renewBelow = 0.2

// Budget is a node's part of one budget: its blocks, its slots, and its
// share while the store is down. It is safe for concurrent use; Take and
// Finish take one mutex and allocate only when a bucket starts.
type Budget struct {
	cfg       Config
	width     int64  // bucket width, ns
	windowKey string // the store key of the window (slots use cfg.Key)
	members   func() int
	// storeless: there is no store at all (no Redis): the share from the
	// start. born is when this node's leaser was made (the process
	// started): within a window of it, in a cluster, what this node's
	// previous process or the others at their larger shares admitted is
	// still in the provider's window, and unknown here.
	storeless bool
	born      int64

	mu     sync.Mutex
	blocks []*block // oldest first
	late   []Use    // charged after its block was given back: for the next Return

	// What was asked of the budget (admitted or not), by interval.
	demand

	grant grantState
	wake  func() // asks the Leaser for a maintain now
	stats Stats

	outage outage
	fenced atomic.Bool // the store's window grants nothing any more (Fence)

	provider providerSaid
	history  windowHistory
	slots    slotHolding
	seed     seedState

	// next: the budget that replaced this one (a reload changed the
	// window), which counts this one's calls in flight as carried: a
	// slot freed here is freed there too, and nothing more is taken here.
	next *Budget
	// retired: taken from no more (Leaser.Retire): its blocks go back,
	// none is asked for, its slots are held for the calls still running.
	retired bool

	line lineWatch

	// fair is the budget's division among the cluster's flows (fair.go).
	fair fairState
}

// grantState is the budget's asking the store for blocks: whether a grant
// is in flight and what a refused request waits on for its end, when the
// next may be asked for, and what it must bring.
type grantState struct {
	// renewal is closed when the next grant attempt ends (made by a Take
	// that found no room, for its caller to wait on); renewing: a grant
	// is in flight.
	renewal  chan struct{}
	renewing bool
	retryAt  int64  // no grant before this (the store had no room)
	needed   Amount // what a refused request needed: the next grant brings at least this
	// saturated: the last grant was short of what was asked (the
	// budget is in demand beyond its limit).
	saturated bool
}

// outage is the budget's state while the store is down: since when, and
// the local share it admits on then, whose uses the store is told of once
// it answers again.
type outage struct {
	since int64       // when the store went down (0: it answers)
	down  atomic.Bool // since != 0, read without the lock
	// none: there is no store at all (storeless), read without the lock.
	// The share is then this node's by its configuration, not an outage.
	none      atomic.Bool
	share     *limiter.Tenant
	shareN    int64 // the members share was sized for
	shareUses []Use // what share admitted, reported once the store answers
}

// providerSaid is what the provider's answers taught the budget
// (learn.go): its limits where lower than the configured ones, and usage
// by others the cluster's window does not hold.
type providerSaid struct {
	// external is what the provider said others used, sent to the
	// store with the next round as externalUses; counted in what the
	// window holds until the next grant says so itself.
	external     Amount
	externalUses []Use
	limits       Amount // the limits the provider says it applies (0: not said)
}

// windowHistory is what this node admitted in the store's window and which
// window that was: what it tells a store that lost the window.
type windowHistory struct {
	uses    []Use // what this node admitted in the last window, by bucket
	gen     int64 // the store window's generation as last seen (0: none yet)
	contact int64 // when a store call last reported gen
	// owed: the store's window was made anew and has not yet been told
	// this node's part of the last one (reportHistory failed, or was not
	// reached): no other store work before it is.
	owed bool
}

// slotHolding is the node's concurrency slots: what it holds in the store
// and until when, and how many of them its calls fill.
type slotHolding struct {
	held, used int64
	until      int64 // when the holding lapses unless renewed
	refused    int64 // refusals since the last renewal
	// carried: of used, the calls admitted elsewhere (before the seed,
	// by the budget this one replaced, or reported by Charge), still
	// running; ReleaseCarried frees them.
	carried int64
}

// seedState is a budget that starts from usage counted elsewhere (Seed):
// the seed is told to the store, and the carried slots held there, before
// anything is granted.
type seedState struct {
	uses    []Use         // the seed, until the store holds it
	pending bool          // the store does not hold the seed yet: Take refuses
	done    chan struct{} // closed once the store holds it (nil: never seeded)
}

// lineWatch is the line of requests waiting for this budget (the
// router's), as Watch registered it.
type lineWatch struct {
	room    func()     // told when something may have freed
	backlog func() int // how many wait, counted in the demand a block is sized for
	flows   Backlog    // how many wait for each flow, for the demand reported
	// roomed: a round brought room (a block, slots, the store back or
	// gone): room is told after it.
	roomed bool
}

// Stats are a budget's counters and state, for /upstreams and /metrics.
type Stats struct {
	Key                  string
	Limits               limiter.Limits
	Blocks               int
	Left                 Amount // what the live blocks have left
	Used                 Amount // the store's window after the last grant
	SlotsHeld, SlotsUsed int64
	Grants, Returns      uint64
	Empty                uint64 // grants that found no room
	StoreErrors          uint64
	Rebuilt              uint64 // times the store had lost the window and was told this node's part
	Corrections          uint64 // times the provider said less was left than the window did
	PartSpent            uint64 // grants not asked for: this node's part of the window was used
	// Part is this node's part of the budget in the last division among
	// the cluster's flows (fair.go), Demand what it reported wanting,
	// Nodes how many nodes reported; Divided is false before the first.
	Divided      bool
	Part, Demand Amount
	PartSlots    int64
	DemandSlots  int64
	Nodes        int
	Learned      limiter.Limits // the limits in force: configured, or lower as the provider said
	Degraded     bool           // the store is down
	DegradedFor  time.Duration  // in total
	degradedNs   int64
}

type block struct {
	gen      int64 // the store window's generation it was granted in
	expires  int64 // the last moment it can be used (ns)
	bucket   int64 // where the store charged it: expires' bucket
	granted  Amount
	left     Amount
	uses     []Use // ascending buckets
	returned bool
}

func appendUse(us []Use, bucket int64, a Amount) []Use {
	if n := len(us); n > 0 && us[n-1].Bucket == bucket {
		us[n-1].Requests += a.Requests
		us[n-1].Tokens += a.Tokens
		return us
	}
	return append(us, Use{Bucket: bucket, Amount: a})
}

// takeBack takes a off what us used at bucket, if it is still there.
func takeBack(us []Use, bucket int64, a Amount) {
	for i := len(us) - 1; i >= 0; i-- {
		if u := &us[i]; u.Bucket == bucket {
			u.Requests -= a.Requests
			u.Tokens -= a.Tokens
			return
		}
	}
}

// adjustUse changes the tokens used at bucket (it is in us).
func adjustUse(us []Use, bucket, tokens int64) {
	for i := len(us) - 1; i >= 0; i-- {
		if us[i].Bucket == bucket {
			us[i].Tokens += tokens
			return
		}
	}
}

// NewBudget makes a node's part of a budget; members reports the live
// members, for the share.
func NewBudget(cfg Config, members func() int) *Budget {
	cfg.defaults()
	width := int64(cfg.Window) / Span
	if width <= 0 {
		width = 1
	}
	if members == nil {
		members = func() int { return 1 }
	}
	// The window's key names its bucket width: bucket indexes of another
	// width (a node still on the old limits.window during a rolling
	// reload) are not comparable.
	windowKey := cfg.Key + "/" + strconv.FormatInt(width, 10)
	return &Budget{cfg: cfg, width: width, windowKey: windowKey, members: members, wake: func() {}}
}

// Watch tells the budget of the requests waiting for it: room is called
// (outside the budget's lock) when it may have room again — a slot or
// tokens given back, a round of store work done — backlog reports how
// many wait, for the size of the next block, and flows how many wait for
// each flow, for the demand it reports.
func (b *Budget) Watch(room func(), backlog func() int, flows Backlog) {
	b.mu.Lock()
	b.line.room, b.line.backlog, b.line.flows = room, backlog, flows
	b.mu.Unlock()
}

// tellRoom calls the room watcher if the round brought room; b.mu is not
// held. A round that changed nothing tells nothing: a line's head refused
// for a slot wakes the Leaser, and being told of room after every round
// would have it try, and wake it, again at once.
func (b *Budget) tellRoom() {
	b.mu.Lock()
	room, roomed := b.line.room, b.line.roomed
	b.line.roomed = false
	b.mu.Unlock()
	if room != nil && roomed {
		room()
	}
}

// roomAfter calls room, taken under the lock, once it is released.
func (b *Budget) roomAfter(room func()) {
	if room != nil {
		room()
	}
}

// waitingLocked is the backlog; b.mu is held.
func (b *Budget) waitingLocked() int64 {
	if b.line.backlog == nil {
		return 0
	}
	return int64(b.line.backlog())
}

// Key is the budget's store key.
func (b *Budget) Key() string { return b.cfg.Key }

// SetLimits changes the limits (a reload), keeping the blocks held.
func (b *Budget) SetLimits(l limiter.Limits, down OnStoreDown) {
	b.mu.Lock()
	if l.Requests < b.cfg.Limits.Requests || l.Tokens < b.cfg.Limits.Tokens {
		b.spendBlocks()
	}
	b.cfg.Limits, b.cfg.OnStoreDown = l, down
	if b.outage.share != nil {
		b.outage.share.SetLimits(b.shareLimits(b.outage.shareN))
	}
	b.mu.Unlock()
}

// spendBlocks leaves the live blocks nothing more to admit (a lower limit:
// what they were granted under the old one is not to be used); they go
// back with the next round, with their uses. b.mu is held.
func (b *Budget) spendBlocks() {
	for _, blk := range b.blocks {
		blk.left = Amount{}
	}
}

// Ticket is what an admitted request keeps for Finish. The zero Ticket
// took nothing.
type Ticket struct {
	on     *Budget // the budget that took it, when not the one asked (replaced); nil: that one
	flow   *flowState
	at     int64 // when it was taken
	asked  int64 // the tokens it counted in its flow's demand
	blk    *block
	lt     limiter.Ticket // on the share
	bucket int64
	tokens int64
	slot   bool
	share  bool
}

// Tokens is what the ticket has charged of the token limit.
func (tk *Ticket) Tokens() int64 { return tk.tokens }

// Decision is Take's answer.
type Decision struct {
	Allowed bool
	Limited limiter.Dimension // what refused
	// RetryAfter is when room is expected, when !Allowed.
	RetryAfter time.Duration
	// Renewal, when not nil, is closed when a grant in flight ends: a
	// refused caller may wait for it (bounded) and Take again.
	Renewal <-chan struct{}
	// Degraded: the store is down; the decision was made on the blocks
	// left, the share, or the OnStoreDown rule.
	Degraded bool
	// Storeless: there is no store at all; a Degraded decision was made
	// on this node's share by configuration, with nothing unreachable.
	Storeless bool
	// Used is what the store's window held, every node's blocks and
	// uses, after this node's last grant.
	Used Amount
}

func (b *Budget) rateLimited() bool { return b.cfg.Limits.Requests > 0 || b.cfg.Limits.Tokens > 0 }

// amount is what a request estimated at tokens takes of the leased
// dimensions.
func (b *Budget) amount(tokens int64) Amount {
	var a Amount
	if b.cfg.Limits.Requests > 0 {
		a.Requests = 1
	}
	if b.cfg.Limits.Tokens > 0 {
		a.Tokens = tokens
	}
	return a
}

// grace is how long after the store went down the other nodes' blocks may
// still be used: no share before.
func (b *Budget) grace() int64 {
	if b.storeless {
		return 0
	}
	return int64(b.cfg.LeaseFor)
}

// Take admits one request estimated at tokens, at now (ns): on a block and
// a slot, or with the store down on what OnStoreDown says; all of them or
// none.
func (b *Budget) Take(now, tokens int64) (Ticket, Decision) { return b.take(now, tokens, true, nil) }

// Retake is Take for a request asked before (the head of a line trying
// again): not counted in the demand again, only kept in it.
func (b *Budget) Retake(now, tokens int64) (Ticket, Decision) { return b.take(now, tokens, false, nil) }

// AskFor counts a request of flow f in the budget's demand without taking
// anything: it waits behind others, and takes with RetakeFor when its turn
// comes.
func (b *Budget) AskFor(now, tokens int64, f *Flow) {
	b.mu.Lock()
	if n := b.next; n != nil {
		b.mu.Unlock()
		n.AskFor(now, tokens, f)
		return
	}
	b.noteAsked(now, tokens)
	b.flowAsked(b.flowLocked(f), now, tokens)
	b.mu.Unlock()
}

// TakeFor is Take for a request of flow f, counted in f's demand for the
// division of the budget among the cluster's flows (fair.go).
func (b *Budget) TakeFor(now, tokens int64, f *Flow) (Ticket, Decision) {
	return b.take(now, tokens, true, f)
}

// RetakeFor is Retake for a request of flow f.
func (b *Budget) RetakeFor(now, tokens int64, f *Flow) (Ticket, Decision) {
	return b.take(now, tokens, false, f)
}

func (b *Budget) take(now, tokens int64, asked bool, f *Flow) (Ticket, Decision) {
	b.mu.Lock()
	if n := b.next; n != nil {
		// Replaced (a reload, the router's state not yet swapped): the
		// budget in force decides, and its ticket says so for Finish.
		b.mu.Unlock()
		tk, d := n.take(now, tokens, asked, f)
		if tk.on == nil {
			tk.on = n
		}
		return tk, d
	}
	defer b.mu.Unlock()
	if b.seed.pending {
		// Nothing before the store holds the seed.
		return Ticket{}, Decision{Limited: limiter.Requests, RetryAfter: time.Duration(b.width), Renewal: b.seed.done}
	}
	if b.roll(now); asked || b.asked.Requests == 0 {
		// A line's retries count once an interval: the line is
		// still demand, its size counted in want.
		b.noteAsked(now, tokens)
	}
	var fs *flowState
	if f != nil {
		if fs = b.flowLocked(f); asked {
			b.flowAsked(fs, now, tokens)
		}
	}
	tk, d := b.decideLocked(now, tokens)
	if fs != nil && d.Allowed {
		if tk.slot {
			fs.inflight++
		}
		tk.flow, tk.at, tk.asked = fs, now, tokens
	}
	return tk, d
}

// decideLocked is Take's decision, on a slot and the blocks, the share or
// what OnStoreDown says; b.mu is held.
func (b *Budget) decideLocked(now, tokens int64) (Ticket, Decision) {
	var tk Ticket
	var d Decision
	d.Degraded, d.Storeless = b.outage.since != 0, b.storeless
	d.Used = b.stats.Used
	if b.cfg.Limits.Concurrency > 0 && b.slots.used >= b.slotLimit(now) {
		b.slots.refused++
		d.Limited, d.RetryAfter = limiter.Concurrency, time.Second
		if b.outage.since == 0 {
			// A renewal may bring a slot: the caller may wait for it.
			if b.grant.renewal == nil {
				b.grant.renewal = make(chan struct{})
			}
			d.Renewal = b.grant.renewal
			b.wake()
		}
		return tk, d
	}
	if b.rateLimited() {
		a := b.amount(tokens)
		bucket := now / b.width
		down := b.outage.since != 0 && now-b.outage.since >= b.grace()
		switch blk := b.usable(now, a); {
		case blk != nil:
			blk.left.Requests -= a.Requests
			blk.left.Tokens -= a.Tokens
			blk.uses = appendUse(blk.uses, bucket, a)
			b.record(now, bucket, a)
			tk = Ticket{blk: blk, bucket: bucket, tokens: a.Tokens}
			if float64(blk.left.Requests) < renewBelow*float64(blk.granted.Requests) ||
				float64(blk.left.Tokens) < renewBelow*float64(blk.granted.Tokens) {
				b.wake()
			}
		case b.outage.since != 0 && b.cfg.OnStoreDown == Open:
			// Admitted without the provider limit.
		case down && b.cfg.OnStoreDown == Share:
			lt, ld := b.shareLimiter(now).Admit(now, tokens)
			if !ld.Allowed {
				d.Limited, d.RetryAfter = ld.Limited, ld.RetryAfter
				return tk, d
			}
			b.outage.shareUses = appendUse(b.outage.shareUses, bucket, a)
			b.record(now, bucket, a)
			tk = Ticket{lt: lt, bucket: bucket, tokens: a.Tokens, share: true}
		default:
			// A grant must bring at least this much (a request larger
			// than what any block has left).
			if l := b.cfg.Limits; l.Tokens <= 0 || a.Tokens <= l.Tokens {
				b.grant.needed = Amount{max(b.grant.needed.Requests, a.Requests), max(b.grant.needed.Tokens, a.Tokens)}
			}
			d.Limited = limiter.Requests
			if a.Requests == 0 || len(b.blocks) > 0 && b.liveLeft(now).Requests > 0 {
				d.Limited = limiter.Tokens
			}
			d.RetryAfter = b.retryAfter(now)
			if b.outage.since == 0 && now >= b.grant.retryAt {
				// A grant may bring room: the caller may wait for it.
				if b.grant.renewal == nil {
					b.grant.renewal = make(chan struct{})
				}
				d.Renewal = b.grant.renewal
				b.wake()
			}
			return tk, d
		}
	}
	if b.cfg.Limits.Concurrency > 0 {
		b.slots.used++
		tk.slot = true
	}
	d.Allowed = true
	return tk, d
}

// record keeps what this node admitted in the last window, per bucket, for
// a store that lost its window; b.mu is held.
func (b *Budget) record(now, bucket int64, a Amount) {
	if n := len(b.history.uses); n > 0 && b.history.uses[0].Bucket <= bucket-Span-1 {
		b.pruneHistory(now)
	}
	b.history.uses = appendUse(b.history.uses, bucket, a)
}

// Cancel undoes a Take whose request was not sent after all (another
// budget refused it): nothing of it reached the provider.
func (b *Budget) Cancel(now int64, tk *Ticket) {
	if tk.on != nil && tk.on != b {
		tk.on.Cancel(now, tk)
		return
	}
	b.mu.Lock()
	defer b.roomAfter(b.line.room)
	defer b.mu.Unlock()
	if fs := tk.flow; fs != nil {
		fs.unask(tk.asked)
		if tk.slot {
			fs.inflight--
		}
	}
	if tk.slot {
		b.freeSlot()
		tk.slot = false
	}
	a := Amount{Tokens: tk.tokens}
	if b.cfg.Limits.Requests > 0 {
		a.Requests = 1
	}
	switch {
	case tk.blk != nil && !tk.blk.returned:
		tk.blk.left.Requests += a.Requests
		tk.blk.left.Tokens += a.Tokens
		takeBack(tk.blk.uses, tk.bucket, a)
		// Nor in this node's charge of the window (capLocked): a part
		// spent on requests never sent is a part another tenant lacks.
		takeBack(b.history.uses, tk.bucket, a)
	case tk.share && b.outage.share != nil:
		// The request stays counted on the share: conservative.
		b.outage.share.Finish(now, &tk.lt, 0)
	}
	*tk = Ticket{}
}

// Finish ends a request taken at tk: its slot is freed and, for a provider
// that settles, its tokens are corrected to actual.
func (b *Budget) Finish(now int64, tk *Ticket, actual int64) {
	if tk.on != nil && tk.on != b {
		tk.on.Finish(now, tk, actual)
		return
	}
	b.mu.Lock()
	defer b.roomAfter(b.line.room)
	defer b.mu.Unlock()
	if tk.slot {
		if tk.flow != nil {
			tk.flow.inflight--
			b.holdTime(now - tk.at)
		}
		b.freeSlot()
		tk.slot = false
	}
	if !b.cfg.Settles || b.cfg.Limits.Tokens <= 0 {
		return
	}
	diff := actual - tk.tokens
	tk.tokens = actual
	if diff != 0 && (tk.blk != nil || tk.share) {
		adjustUse(b.history.uses, tk.bucket, diff) // this node's part of the window (capLocked)
	}
	switch {
	case diff == 0:
	case tk.blk != nil && !tk.blk.returned:
		tk.blk.left.Tokens -= diff
		adjustUse(tk.blk.uses, tk.bucket, diff)
	case tk.blk != nil && diff > 0:
		// Given back already: the excess goes with the next Return. A
		// credit is dropped (the store keeps the larger charge).
		b.late = appendUse(b.late, tk.bucket, Amount{Tokens: diff})
	case tk.share:
		if b.outage.share != nil {
			b.outage.share.Settle(now, &tk.lt, actual)
		}
		adjustUse(b.outage.shareUses, tk.bucket, diff)
	}
}

// usable is the oldest live block with room for a.
func (b *Budget) usable(now int64, a Amount) *block {
	for _, blk := range b.blocks {
		if !blk.returned && now <= blk.expires && blk.left.Requests >= a.Requests && blk.left.Tokens >= a.Tokens {
			return blk
		}
	}
	return nil
}

func (b *Budget) liveLeft(now int64) Amount {
	var s Amount
	for _, blk := range b.blocks {
		if !blk.returned && now <= blk.expires {
			s.Requests += max(0, blk.left.Requests)
			s.Tokens += max(0, blk.left.Tokens)
		}
	}
	return s
}

// RetryAfter estimates when a request refused now could be admitted.
func (b *Budget) RetryAfter(now int64) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.retryAfter(now)
}

// retryAfter estimates when a refused request could be admitted: when the
// store said room frees, else after a renewal.
func (b *Budget) retryAfter(now int64) time.Duration {
	if b.grant.retryAt > now {
		return time.Duration(b.grant.retryAt - now)
	}
	return time.Duration(b.width)
}

// slotLimit is the slots this node may fill now.
func (b *Budget) slotLimit(now int64) int64 {
	switch {
	case now < b.slots.until:
		// Past its part (the division moved) the node admits no call
		// until enough of its own end; its holding shrinks with them.
		return min(b.slots.held, b.slotPartLocked(b.cfg.Limits.Concurrency))
	case b.outage.since == 0:
		// The holding lapsed in the store without a failed call (the
		// lease loop stalled): other nodes may have the slots now.
		return 0
	case b.cfg.OnStoreDown == Open:
		return 1 << 62
	case b.cfg.OnStoreDown == Closed:
		return 0
	case b.storeless || now-b.outage.since >= int64(b.cfg.SlotTTL):
		// Every other node's holding has lapsed by now.
		return b.cfg.Limits.Concurrency / max(1, int64(b.members()))
	}
	return 0
}

func (b *Budget) shareLimits(n int64) limiter.Limits {
	l := b.cfg.Limits
	return limiter.Limits{Requests: l.Requests / n, Tokens: l.Tokens / n}
}

// shareLimiter is the local window of the share, made on first use and
// resized when the members change. Made after an outage (or, without a
// store, within a window of the node's start, in a cluster), it is charged
// as if this node's share of the whole window had been used just now: what
// the cluster admitted before the store went silent is unknown here. When
// the members drop (the share grows), the growth is charged the same way.
func (b *Budget) shareLimiter(now int64) *limiter.Tenant {
	n := max(1, int64(b.members()))
	if b.outage.share == nil {
		b.outage.share = limiter.NewTenant(b.shareLimits(n), b.cfg.Window, b.cfg.Window)
		b.outage.shareN = n
		switch l := b.shareLimits(n); {
		case !b.storeless:
			b.outage.share.ChargeAt(now, now, l.Requests, l.Tokens)
		case n > 1 && now-b.born < int64(b.cfg.Window):
			// A storeless node that started less than a window ago in
			// a cluster charges its share as used when it started: it
			// restarted (its previous process admitted up to it), or
			// joined (the others admitted up to their larger shares
			// before); uncharged, a window would see 450 and 400
			// requests for 300. Charged at the start, not at the first
			// request: what it stands for leaves the window a window
			// after the start (a first request late in that window
			// would be refused for a window more).
			b.outage.share.ChargeAt(now, b.born, l.Requests, l.Tokens)
		}
		return b.outage.share
	}
	if n != b.outage.shareN {
		old, nl := b.shareLimits(b.outage.shareN), b.shareLimits(n)
		b.outage.share.SetLimits(nl)
		if n < b.outage.shareN {
			b.outage.share.ChargeAt(now, now, nl.Requests-old.Requests, nl.Tokens-old.Tokens)
		}
		b.outage.shareN = n
	}
	return b.outage.share
}

// noteAsked counts demand in intervals of a block's life.
func (b *Budget) noteAsked(now, tokens int64) { b.demand.add(now, int64(b.cfg.LeaseFor), tokens) }

// roll starts a new demand interval when a block's life has passed: a
// node asked nothing for two intervals wants no block.
func (b *Budget) roll(now int64) { b.demand.roll(now, int64(b.cfg.LeaseFor)) }

// demand is what was asked, admitted or not: since since, and in the
// interval of the same length before it (from prevSince).
type demand struct {
	asked, askedPrev Amount
	since, prevSince int64
}

// add counts a request of tokens at now, in intervals of length life.
func (d *demand) add(now, life, tokens int64) {
	d.roll(now, life)
	d.asked.Requests++
	d.asked.Tokens += tokens
}

// sub takes back a request of tokens counted in the current interval.
func (d *demand) sub(tokens int64) {
	d.asked.Requests = max(0, d.asked.Requests-1)
	d.asked.Tokens = max(0, d.asked.Tokens-tokens)
}

// rate is what was asked per nanosecond over the last interval of length
// life and the current one (over a quarter of life at least).
func (d *demand) rate(now, life int64) rated {
	d.roll(now, life)
	from := d.since
	if d.prevSince != 0 {
		from = d.prevSince
	}
	elapsed := float64(max(now-from, life/4, 1))
	return rated{float64(d.asked.Requests+d.askedPrev.Requests) / elapsed, float64(d.asked.Tokens+d.askedPrev.Tokens) / elapsed}
}

// roll starts a new interval when one of length life has passed; after two
// without a roll, nothing was asked in the one before.
func (d *demand) roll(now, life int64) {
	if d.since == 0 {
		d.since = now
	}
	if now-d.since >= life {
		if now-d.since < 2*life {
			d.askedPrev, d.prevSince = d.asked, d.since
		} else {
			d.askedPrev, d.prevSince = Amount{}, now-life
		}
		d.asked, d.since = Amount{}, now
	}
}

// want is the block to ask for: the recent demand over a block's life, a
// quarter more, and room for one more request; within the limits.
func (b *Budget) want(now int64) Amount {
	total := Amount{b.asked.Requests + b.askedPrev.Requests, b.asked.Tokens + b.askedPrev.Tokens}
	if total.Requests == 0 {
		return Amount{}
	}
	// Those waiting in the line were asked once and are still wanted, on
	// top of the rate: a node with a long line gets a bigger block.
	queued := b.waitingLocked()
	from := b.since
	if b.prevSince != 0 {
		from = b.prevSince
	}
	elapsed := max(now-from, int64(b.cfg.LeaseFor)/4, 1)
	life := float64(b.cfg.LeaseFor)
	if b.grant.saturated {
		// The store has less than the nodes want: what frees is handed
		// out a bucket at a time, and a block a slow node would take a
		// block's life to use would hold it back from the others.
		life = float64(b.width)
	}
	scale := 1.25 * life / float64(elapsed)
	per := total.Tokens / total.Requests
	// One request more than the demand, on both dimensions.
	w := Amount{Requests: int64(float64(total.Requests)*scale) + 1 + queued, Tokens: int64(float64(total.Tokens)*scale) + per*(1+queued)}
	w.Requests, w.Tokens = max(w.Requests, b.grant.needed.Requests), max(w.Tokens, b.grant.needed.Tokens)
	l := b.cfg.Limits
	if l.Requests <= 0 {
		w.Requests = 0
	} else {
		w.Requests = min(w.Requests, l.Requests)
	}
	if l.Tokens <= 0 {
		w.Tokens = 0
	} else {
		w.Tokens = min(w.Tokens, l.Tokens)
	}
	return w
}

// blockWant is the block to ask for now, and the least worth granting;
// ok is false when none is needed, or this node's part of the window
// (fair.go) has no room for one: then no grant is asked for until its
// oldest charge leaves the window or the next division, and a request
// waiting for a grant waits no more. b.mu is held.
func (b *Budget) blockWant(now int64) (want, least Amount, ok bool) {
	if !b.needsBlock(now) {
		return Amount{}, Amount{}, false
	}
	want, least = b.want(now), b.amount(b.perRequest())
	if !b.capLocked(now, &want, least) {
		b.grant.retryAt = b.partFreesAt(now)
		b.fair.peek = now-b.fair.peekedAt >= b.reportEvery()
		b.stats.PartSpent++
		if b.grant.renewal != nil {
			close(b.grant.renewal)
			b.grant.renewal = nil
		}
		return Amount{}, Amount{}, false
	}
	return want, least, true
}

// needsBlock reports whether a new block should be asked for now.
func (b *Budget) needsBlock(now int64) bool {
	b.roll(now)
	if !b.rateLimited() || b.retired || b.grant.renewing || now < b.grant.retryAt || b.asked.Requests+b.askedPrev.Requests == 0 {
		return false
	}
	var newest *block
	for _, blk := range b.blocks {
		if !blk.returned && now <= blk.expires {
			newest = blk
		}
	}
	if newest == nil || (b.grant.needed != Amount{}) && b.usable(now, b.grant.needed) == nil {
		return true
	}
	if newest.expires-now < int64(b.cfg.LeaseFor)/4 {
		return true
	}
	left := b.liveLeft(now)
	g := newest.granted
	return float64(left.Requests) < renewBelow*float64(g.Requests) || float64(left.Tokens) < renewBelow*float64(g.Tokens)
}

// Seed starts the budget from usage counted elsewhere before it: uses by
// bucket (ascending) and slots of calls still running, which the budget
// counts as its own until ReleaseCarried. The Leaser tells the store both
// before it asks for any block; Seeded is closed then. Take refuses until
// then. Call it once, before the budget is used.
func (b *Budget) Seed(uses []Use, slots int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seed.uses = append([]Use(nil), uses...)
	b.seed.pending = true
	b.seed.done = make(chan struct{})
	b.slots.carried = max(0, slots)
	b.slots.used += b.slots.carried
	for _, u := range uses {
		b.history.uses = appendUse(b.history.uses, u.Bucket, u.Amount)
	}
	b.wake()
}

// Seeded is closed once the store holds the seed (nil: never seeded).
func (b *Budget) Seeded() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seed.done
}

// ReleaseCarried frees the slot of one call that Seed carried over.
func (b *Budget) ReleaseCarried() {
	b.mu.Lock()
	if b.slots.carried > 0 {
		b.slots.carried--
		b.freeSlot()
	}
	b.mu.Unlock()
}

// freeSlot frees one slot of a call counted here, and in the budget that
// replaced this one (a chain, after reloads in a row); b.mu is held.
// Locks are taken along the chain, never back: a budget's next is newer.
func (b *Budget) freeSlot() {
	b.slots.used--
	if b.next != nil {
		b.next.ReleaseCarried()
	}
}

// replaceBy makes n, not yet in use, count b's calls in flight as its own
// until they end (carried), and b take nothing more: the provider's
// concurrency has no window, so a reload of the window must not forget
// the calls running at the provider (with every slot held by streams, a
// reload would let as many again in).
func (b *Budget) replaceBy(n *Budget) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n.slots.carried += b.slots.used
	n.slots.used += b.slots.used
	b.next = n
}

// Degraded reports whether the store is down for this budget, or absent
// (Storeless). It takes no lock.
func (b *Budget) Degraded() bool { return b.outage.down.Load() }

// Storeless reports whether the budget has no store at all: each node
// keeps to its share by configuration. It takes no lock.
func (b *Budget) Storeless() bool { return b.outage.none.Load() }

// Charge counts a use made elsewhere that the budget must hold too (a
// call admitted outside it, reported late; a carried call that settled
// above what it reserved): on a live block with room for it, as if it had
// been admitted there, else in the store's window with the next round.
// slot: the call is still running, its slot carried until ReleaseCarried.
func (b *Budget) Charge(now int64, u Use, slot bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if blk := b.usable(now, u.Amount); blk != nil {
		blk.left.Requests -= u.Requests
		blk.left.Tokens -= u.Tokens
		blk.uses = append(blk.uses, u)
	} else {
		b.late = append(b.late, u)
	}
	b.history.uses = appendUse(b.history.uses, u.Bucket, u.Amount)
	if slot && b.cfg.Limits.Concurrency > 0 {
		b.slots.carried++
		b.slots.used++
	}
}

// storeFailed notes a failed store call.
func (b *Budget) storeFailed(now int64) {
	b.stats.StoreErrors++
	if b.outage.since == 0 {
		b.outage.since = now
		b.outage.down.Store(true)
		b.line.roomed = true // on_redis_down decides now: open may admit
	}
}

// tellSeed tells the store a seeded budget's seed and holds its carried
// slots; it reports false while that is not done.
func (b *Budget) tellSeed(ctx context.Context, st Store, node string, now int64, give func(ReturnRequest) bool) bool {
	b.mu.Lock()
	seeding, seed := b.seed.pending, b.seed.uses
	want, limit := min(b.cfg.Limits.Concurrency, b.slots.used+1), b.cfg.Limits.Concurrency
	b.mu.Unlock()
	if !seeding {
		return true
	}
	if seed != nil {
		if !give(ReturnRequest{Expires: now / b.width, Used: seed}) {
			return false
		}
		b.mu.Lock()
		b.seed.uses = nil
		b.mu.Unlock()
	}
	if limit > 0 {
		held, err := st.HoldSlots(ctx, b.cfg.Key, node, want, limit, now, b.cfg.SlotTTL)
		b.mu.Lock()
		if err != nil {
			b.storeFailed(now)
			b.mu.Unlock()
			return false
		}
		b.slots.held, b.slots.until = held, now+int64(b.cfg.SlotTTL)
		b.mu.Unlock()
	}
	b.mu.Lock()
	b.seed.pending = false
	close(b.seed.done)
	b.mu.Unlock()
	return true
}

// rebuildWait is how long after a node found the store's window made anew
// it asks for no block: the other nodes tell the window what they used in
// the last one as soon as they reach the store again (a node whose
// breaker is open does within its 500 ms); what is granted before they
// have could be granted twice.
const rebuildWait = time.Second

// genProbe is how often a node with usage in the window checks the
// window's generation when it makes no other store call: with the
// breaker's 500 ms, well within rebuildWait.
const genProbe = 250 * time.Millisecond

// newGen notes the window generation a store call reported, and whether it
// is not the one this node used before (never the first time).
func (b *Budget) newGen(now, gen int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.newGenLocked(now, gen)
}

func (b *Budget) newGenLocked(now, gen int64) bool {
	prev, seen := b.history.gen, b.history.contact
	b.history.gen, b.history.contact = gen, now
	// A window whose key expired (no node called for its TTL: two
	// windows and a block's life) holds nothing that counts: only one
	// lost sooner was lost with usage in it.
	if prev != 0 && gen != prev && now-seen < int64(2*b.cfg.Window+b.cfg.LeaseFor) {
		b.grant.retryAt = max(b.grant.retryAt, now+int64(rebuildWait))
		b.history.owed = true
		return true
	}
	return false
}

// reportHistory charges this node's part of the last window to the store's
// window, made anew: what it admitted on the blocks it gave back, and the
// whole grant of each block it still holds (at its expiry, as a grant is
// charged: giving it back later takes the grant off and charges its uses).
func (b *Budget) reportHistory(ctx context.Context, st Store, now int64, keyTTL time.Duration) bool {
	b.mu.Lock()
	b.pruneHistory(now)
	report := append([]Use(nil), b.history.uses...)
	for _, blk := range b.blocks {
		if blk.returned {
			continue
		}
		for _, u := range blk.uses {
			adjustUse(report, u.Bucket, -u.Tokens)
			for i := range report {
				if report[i].Bucket == u.Bucket {
					report[i].Requests -= u.Requests
				}
			}
		}
		report = append(report, Use{Bucket: blk.bucket, Amount: blk.granted})
	}
	b.stats.Rebuilt++
	b.mu.Unlock()
	gen, err := st.Return(ctx, b.windowKey, ReturnRequest{Now: now / b.width, Expires: now / b.width, Used: report, KeyTTL: keyTTL})
	if err != nil {
		b.mu.Lock()
		b.storeFailed(now)
		b.mu.Unlock()
		return false
	}
	b.mu.Lock()
	b.history.gen, b.history.owed = gen, false
	for _, blk := range b.blocks {
		blk.gen = gen // their grants are in this window now
	}
	b.mu.Unlock()
	return true
}

// pruneHistory drops the buckets that left the window; b.mu is held.
func (b *Budget) pruneHistory(now int64) {
	cut := now/b.width - Span - 1
	i := 0
	for i < len(b.history.uses) && b.history.uses[i].Bucket <= cut {
		i++
	}
	if i > 0 {
		b.history.uses = append(b.history.uses[:0], b.history.uses[i:]...)
	}
}

// spent reports a block that can admit nothing more: what it has left of
// the other dimension is better back in the store.
func (b *Budget) spent(blk *block) bool {
	if b.cfg.Limits.Requests > 0 && blk.left.Requests <= 0 {
		return true
	}
	// Tokens: less left than an average request asks is a fragment.
	return b.cfg.Limits.Tokens > 0 && blk.left.Tokens < b.perRequest()
}

// perRequest is the tokens an average recent request asked for (at least 1).
func (b *Budget) perRequest() int64 {
	asked := b.asked.Requests + b.askedPrev.Requests
	if asked == 0 {
		return 1
	}
	return max(1, (b.asked.Tokens+b.askedPrev.Tokens)/asked)
}

// dropExpired forgets expired blocks (no store to give them back to).
func (b *Budget) dropExpired(now int64) {
	keep := b.blocks[:0]
	for _, blk := range b.blocks {
		if now <= blk.expires {
			keep = append(keep, blk)
		}
	}
	b.blocks = keep
}

// giveBack returns every block and slot now (a drain): what is left unused
// stops counting in the store's window at once.
func (b *Budget) giveBack(ctx context.Context, st Store, node string, now int64) error {
	if st == nil {
		return nil
	}
	b.mu.Lock()
	back := b.blocks
	b.blocks = nil
	for _, blk := range back {
		blk.returned = true
	}
	b.mu.Unlock()
	keyTTL := 2*b.cfg.Window + b.cfg.LeaseFor
	for _, blk := range back {
		if _, err := st.Return(ctx, b.windowKey, ReturnRequest{Gen: blk.gen, Now: now / b.width, Expires: blk.bucket, Granted: blk.granted, Used: blk.uses, KeyTTL: keyTTL}); err != nil {
			return err
		}
	}
	b.mu.Lock()
	used, limit := b.slots.used, b.cfg.Limits.Concurrency
	replaced := b.next != nil
	b.mu.Unlock()
	if limit > 0 && !replaced { // else the budget that replaced it holds them
		if _, err := st.HoldSlots(ctx, b.cfg.Key, node, used, limit, now, b.cfg.SlotTTL); err != nil {
			return err
		}
	}
	b.mu.Lock()
	told := b.fair.reportedEmpty || b.fair.reportedAt == 0
	b.mu.Unlock()
	if !told && !b.tellEmpty(ctx, st, node, now) {
		return ErrStoreDown // the report lapses by itself
	}
	return nil
}

// fence closes the budget's window in the store to grants, for every node,
// and reports what it holds then.
func (b *Budget) fence(ctx context.Context, st Store, now int64, keep time.Duration) (Amount, error) {
	b.mu.Lock()
	el := b.limitsLocked()
	b.mu.Unlock()
	reply, err := st.Grant(ctx, b.windowKey, GrantRequest{Now: now / b.width, Expires: now / b.width,
		Limit: Amount{el.Requests, el.Tokens}, KeyTTL: max(2*b.cfg.Window+b.cfg.LeaseFor, keep), Fence: true})
	if err != nil {
		return Amount{}, err
	}
	b.fenced.Store(true)
	return reply.Used, nil
}

// Fenced reports whether the budget's window was closed to grants (by
// this node or, as its last grant said, another). It takes no lock.
func (b *Budget) Fenced() bool { return b.fenced.Load() }

// Stats reports the budget's counters and state at now.
func (b *Budget) Stats(now int64) Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	s.Key, s.Limits = b.cfg.Key, b.cfg.Limits
	s.Learned = b.limitsLocked()
	for _, blk := range b.blocks {
		if now <= blk.expires {
			s.Blocks++
		}
	}
	s.Left = b.liveLeft(now)
	s.SlotsHeld, s.SlotsUsed = b.slots.held, b.slots.used
	if d := b.fair.div; d.known {
		s.Divided, s.Part, s.PartSlots, s.Demand, s.DemandSlots, s.Nodes = true, d.rate, d.slots, d.demand, d.demandSlots, d.nodes
	}
	// Without a store nothing is unreachable: a standalone node, or one
	// run without Redis on purpose, is not degraded.
	s.Degraded = b.outage.since != 0 && !b.storeless
	d := s.degradedNs
	if s.Degraded {
		d += now - b.outage.since
	}
	s.DegradedFor = time.Duration(d)
	return s
}
