package limiter

import (
	"slices"
	"time"
)

// Buckets are indexed by absolute time (Unix nanoseconds / bucket width), so
// a window's state means the same on every node with the same settings: it
// can be handed to another node and continued exactly, and a charge made on
// one node can be adjusted on another by its bucket index.

// Bucket is one non-empty bucket of a window.
type Bucket struct {
	Index int64 // absolute bucket index
	Value int64
}

// WindowState is a window's content: its bucket width and the non-empty
// buckets still inside it, oldest first.
type WindowState struct {
	Width   int64 // nanoseconds
	Head    int64 // newest bucket index seen
	Buckets []Bucket
}

// State is a tenant's whole limiter state: requests and tokens charged in
// the window (tokens include reservations not yet settled), and the
// concurrency slots held, each in the bucket it expires with.
type State struct {
	Requests, Tokens, Slots WindowState
	// Away are the slots of calls running on other nodes (away.go).
	Away []NodeSlots
	// Holder names the node whose calls Slots are ("": the node holding
	// this State). Not encoded: a snapshot's writer says it (As).
	Holder string
}

// Empty reports whether the state holds no charge at all.
func (s State) Empty() bool {
	return len(s.Requests.Buckets) == 0 && len(s.Tokens.Buckets) == 0 && len(s.Slots.Buckets) == 0 && len(s.Away) == 0
}

func (w *Window) export() WindowState {
	ws := WindowState{Width: w.width, Head: w.head}
	for b := w.oldest(); b <= w.head; b++ {
		if v := w.at(b % ring); v != 0 {
			ws.Buckets = append(ws.Buckets, Bucket{Index: b, Value: v})
		}
	}
	return ws
}

// merge adds a handed-over window to this one. Buckets already out of the
// window are dropped. With another bucket width (the settings changed
// between the nodes) the total is charged to the newest bucket: later than
// true, so conservative. The tenant has rolled the window to the buckets
// ahead of its head that it takes as the writer's clock (clock.go) first.
func (w *Window) merge(ws WindowState) {
	if ws.Width != w.width {
		var sum int64
		for _, b := range ws.Buckets {
			sum += b.Value
		}
		if sum > 0 {
			w.charge(sum)
		}
		return
	}
	for _, b := range ws.Buckets {
		if b.Value <= 0 || b.Index < w.oldest() {
			continue
		}
		if b.Index > w.head {
			// Further ahead than a clock is trusted (maxAhead): count
			// the charge now rather than drop it.
			b.Index = w.head
		}
		w.add(b.Index%ring, b.Value)
		w.total += b.Value
		if b.Index > w.newest {
			w.newest = b.Index
		}
	}
}

func (w *Window) reset() {
	w.drop()
	w.total = 0
}

// Export returns the tenant's state at now.
func (t *Tenant) Export(now int64) State {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	return State{Requests: t.requests.export(), Tokens: t.tokens.export(), Slots: t.slots.export(), Away: t.exportAway()}
}

// ExportOrArm is Export that also reports whether the state is empty; when
// it is, the next change calls OnChange's function again. Nothing can
// change in between: both happen under the lock.
func (t *Tenant) ExportOrArm(now int64) (State, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	s := State{Requests: t.requests.export(), Tokens: t.tokens.export(), Slots: t.slots.export(), Away: t.exportAway()}
	empty := s.Empty()
	if empty {
		t.armed = true
	}
	return s, empty
}

// emptyLocked reports whether the tenant holds no charge (under the lock).
func (t *Tenant) emptyLocked() bool {
	s := State{Requests: t.requests.export(), Tokens: t.tokens.export(), Slots: t.slots.export(), Away: t.exportAway()}
	return s.Empty()
}

// Import replaces the tenant's windows with a handed-over state, at now, and
// makes this the tenant's authoritative state again (see Freeze).
func (t *Tenant) Import(now int64, s State) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	t.changed()
	t.frozen, t.sealed = false, false
	t.movedTo.Store(nil)
	t.requests.reset()
	t.tokens.reset()
	t.slots.reset()
	t.catchUpState(s)
	t.requests.merge(s.Requests)
	t.tokens.merge(s.Tokens)
	t.slots.merge(s.Slots)
	t.importAway(s.Away)
	t.awayLog, t.awayDropped = nil, nil
	t.ownChanges = t.emptySlotWindow()
	t.logUntil = now + max(t.requests.width*Buckets, int64(LateAccountHorizon))
	t.startFresh() // the calls admitted here so far are the state's now
}

// LateAccountHorizon is the least time after an Import that a late account
// of the state imported (Replace) still finds what was applied since: the
// handoff takes late final snapshots for a few seconds whatever the window,
// and with a window of 2 s alone a final that comes 2.1 s after the Import
// would undo a release of this node's own call made in between.
const LateAccountHorizon = 10 * time.Second

// Freeze marks the tenant's state as handed over to the node named to and
// returns it: from now on that node counts this tenant. Admit refuses to
// decide (Decision.Moved), so no headroom is spent twice, and what calls
// admitted here before do afterwards (FinishOrHand) goes to the new owner
// as deltas instead of into these windows, so nothing is counted twice or
// lost. Freezing a frozen tenant again only changes where it went.
func (t *Tenant) Freeze(now int64, to string) State {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	t.frozen = true
	t.movedTo.Store(&to)
	return State{Requests: t.requests.export(), Tokens: t.tokens.export(), Slots: t.slots.export(), Away: t.exportAway()}
}

// Seal stops the tenant's decisions here and returns its state at that
// instant: its requests are decided elsewhere for a while (a shared budget
// that every node admits on, spillover), which starts from that state.
// Admit answers Moved (with MovedTo ""), so no admission slips in after the
// state was read; everything else — Finish of calls admitted before,
// deltas reporting what was admitted elsewhere — counts here as usual, so
// that Unseal finds the windows complete.
func (t *Tenant) Seal(now int64) State {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	t.sealed = true
	return State{Requests: t.requests.export(), Tokens: t.tokens.export(), Slots: t.slots.export(), Away: t.exportAway()}
}

// Unseal makes this node decide for the tenant again (Seal).
func (t *Tenant) Unseal() {
	t.mu.Lock()
	t.sealed = false
	t.mu.Unlock()
}

// Sealed reports whether the tenant is sealed.
func (t *Tenant) Sealed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sealed
}

// MovedTo is the node the tenant was handed over to, "" while this node
// counts it. It takes no lock.
func (t *Tenant) MovedTo() string {
	if p := t.movedTo.Load(); p != nil {
		return *p
	}
	return ""
}

// Thaw makes the windows authoritative again without importing anything: a
// tenant comes back to a node that has no better account of it.
func (t *Tenant) Thaw() {
	t.mu.Lock()
	t.frozen, t.sealed = false, false
	t.movedTo.Store(nil)
	t.mu.Unlock()
}

// FinishOrHand is Finish for a tenant that may have been handed over: if it
// was (Freeze), nothing is applied here and the change is returned as a
// delta for the new owner, with ok true.
func (t *Tenant) FinishOrHand(now int64, tk *Ticket, actual int64) (d Delta, handed bool) {
	if !tk.admitted {
		return Delta{}, false
	}
	t.mu.Lock()
	t.changed()
	if !t.frozen {
		// Unlocked without a defer: every call's end takes this path.
		t.finishLocked(now, tk, actual)
		t.mu.Unlock()
		return Delta{}, false
	}
	defer t.mu.Unlock()
	d = FinishDelta(tk, actual)
	d.Bucket, d.SlotBucket = t.history.buckets(tk) // in the current windows (rebucket.go)
	if !tk.released {
		t.handOwn(tk, d.SlotBucket)
	}
	tk.tokens = actual
	tk.released = true
	return d, true
}

// ChargeGap charges the buckets after the state's newest bucket up to now as
// if the tenant had spent them at its recent peak rate: the conservative
// stand-in for what happened between a stale snapshot and now. The peak is
// the largest bucket of s; what is charged never takes a window past its
// limit. When the limit caps the charge, the newest buckets are charged
// first: the spending assumed is the most recent possible, so it weighs on
// the windows that follow for as long as real spending could. It returns
// the requests and tokens charged.
func (t *Tenant) ChargeGap(now int64, s State) (requests, tokens int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	t.changed()
	return t.requests.chargeGap(s.Requests), t.tokens.chargeGap(s.Tokens)
}

func (w *Window) chargeGap(ws WindowState) int64 {
	var peak int64
	for _, b := range ws.Buckets {
		peak = max(peak, b.Value)
	}
	if peak == 0 || ws.Width != w.width {
		return 0
	}
	var charged int64
	for b := w.head; b >= max(ws.Head+1, w.oldest()); b-- {
		n := peak
		if w.limit > 0 {
			n = min(n, w.limit-w.total)
		}
		if n <= 0 {
			break
		}
		w.add(b%ring, n)
		w.total += n
		w.newest = max(w.newest, b)
		charged += n
	}
	return charged
}

// Delta is a change to a tenant's windows made on another node: a call the
// previous owner admitted settles or ends there after the tenant moved, and
// the owner applies it to the buckets it was charged in.
type Delta struct {
	Bucket     int64 // the request and token bucket of the call
	SlotBucket int64 // the bucket its slot expires with
	Requests   int64 // requests charged (1 for an admission reported late)
	Tokens     int64 // tokens charged (+) or credited back (-)
	Slots      int64 // slots taken (+1) or released (-1)
	// ID names the delta for a receiver that may be given it twice (a
	// report sent again after its answer was lost); 0: unnamed. The
	// limiter ignores it.
	ID uint64 `json:",omitempty"`
	// Epoch names a spell of decisions made elsewhere (Seal) that the
	// call was admitted in, for the caller; 0: none. The limiter ignores
	// it.
	Epoch int64 `json:",omitempty"`
}

// Tally is a ticket for a request charged on no window here, admitted at
// now with tokens: the node that counts the tenant applies what DeltaOf and
// FinishDelta make of it. Finish, Release and Cancel ignore it.
func (t *Tenant) Tally(now, tokens int64) Ticket {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Ticket{bucket: now / t.requests.width, slotBucket: now / t.slots.width, tokens: tokens}
}

// DeltaOf describes a ticket's effect so far (an admission), for reporting
// a call admitted elsewhere (a fallback share) to the tenant's owner.
func DeltaOf(tk *Ticket) Delta {
	return Delta{Bucket: tk.bucket, SlotBucket: tk.slotBucket, Requests: 1, Tokens: tk.tokens, Slots: 1}
}

// Apply adds a delta whose slots are this node's calls (ApplyFrom for
// another node's).
func (t *Tenant) Apply(now int64, d Delta) { t.ApplyFrom(now, "", d) }

// FinishDelta is what Finish(now, tk, actual) changes, for reporting it to
// the owner when tk was admitted before the tenant moved away.
func FinishDelta(tk *Ticket, actual int64) Delta {
	d := Delta{Bucket: tk.bucket, SlotBucket: tk.slotBucket, Tokens: actual - tk.tokens}
	if !tk.released {
		d.Slots = -1
	}
	return d
}

// SettleDelta is FinishDelta for a ticket no local tenant settles (its
// charge was reported elsewhere): tk is marked settled at actual with its
// slot released, so that a second settlement reports only the change.
func SettleDelta(tk *Ticket, actual int64) Delta {
	d := FinishDelta(tk, actual)
	tk.tokens, tk.released = actual, true
	return d
}

// Window is the length of the tenant's request and token windows.
func (t *Tenant) Window() time.Duration {
	t.mu.Lock() // Rebucket changes it
	defer t.mu.Unlock()
	return t.requests.Length()
}

// Replace swaps a part of the tenant's state that came from elsewhere for a
// better account of the same thing: every bucket loses what old held and
// gains what new holds, and what this node charged itself stays. A new
// owner that took a tenant over from a stale snapshot (plus the gap charged
// at the peak rate) uses it when the previous owner's final snapshot
// arrives after all. The other nodes' slots are replaced node by node: the
// previous owner's calls that ended since the stale account free their
// slots, and those it started since take theirs.
func (t *Tenant) Replace(now int64, old, new State) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	t.changed()
	t.catchUpState(new)
	t.requests.replace(old.Requests, new.Requests)
	t.tokens.replace(old.Tokens, new.Tokens)
	t.replaceOwnSlots(now, old.Slots, new.Slots)
	t.replaceAway(now, old.Away, new.Away)
}

// replaceOwnSlots is Replace for the slots of this node's calls. Until
// logUntil they are the better account's, plus every change
// made to them since the Import (ownChanges): admissions here, releases by
// ticket, this node's calls reported by delta (a fallback share's), as
// replaceAway does for the other nodes' deltas and for the same reason.
// Replacing bucket by bucket instead (lose what old held, gain what new
// holds) loses a release applied in between: the bucket the release had
// emptied cannot lose the old account's charge again (never below 0), and
// gains the new account's back, which held the slot of a call that had
// ended until the slot TTL. Later, or across a Rebucket (the accounts'
// buckets no longer line up), the bucket by bucket replace it is. Either
// way, while the calls admitted here since the Import are counted apart,
// no bucket is left below theirs (ownslots.go).
func (t *Tenant) replaceOwnSlots(now int64, old, new WindowState) {
	changes := t.ownChanges
	if changes == nil || now >= t.logUntil || new.Width != t.slots.width {
		t.slots.replace(old, new)
	} else {
		t.slots.reset()
		t.slots.merge(new)
		for b := changes.oldest(); b <= changes.head; b++ {
			if v := changes.at(b % ring); v != 0 {
				t.slots.adjust(b, v)
			}
		}
	}
	if t.fresh != nil {
		t.keepFresh()
	}
}

// adjustOwnSlots changes the slots of this node's calls in bucket b by
// delta, and keeps the change for a late account (ownChanges).
func (t *Tenant) adjustOwnSlots(b, delta int64) {
	t.slots.adjust(b, delta)
	if t.ownChanges != nil {
		t.ownChanges.record(b, delta)
	}
}

// record adds delta, whatever its sign, to bucket b if it is live: w is a
// sum of changes (ownChanges), not a count, and its buckets and total can
// be negative. roll still drops the buckets only when they hold nothing:
// when the total is 0 and the newest positive change has left, what is
// left is negative changes summing to 0, so none.
func (w *Window) record(b, delta int64) {
	if delta == 0 || !w.live(b) {
		return
	}
	w.add(b%ring, delta)
	w.total += delta
	if delta > 0 && b > w.newest {
		w.newest = b
	}
}

// replaceAway is Replace for the slots of calls on other nodes. Within a
// window of the Import, a node's slots are its better account's, plus the
// slot deltas it reported since the Import: those are all about calls the
// account counts (a node reports its calls' ends only once it has handed
// the tenant over, after it wrote that account), or made after it. A node
// dropped since (gone) stays dropped. Later, each node's buckets lose what
// old held and gain what new holds, as for the other windows. A node left
// with no slot is forgotten, as DropNode does: a release from it for a
// call not counted here changes nothing.
func (t *Tenant) replaceAway(now int64, old, new []NodeSlots) {
	find := func(list []NodeSlots, node string) WindowState {
		for _, ns := range list {
			if ns.Node == node {
				return ns.Slots
			}
		}
		return WindowState{Width: t.slots.width}
	}
	logged := now < t.logUntil
	nodes := make([]string, 0, len(old)+len(new))
	for _, ns := range old {
		nodes = append(nodes, ns.Node)
	}
	for _, ns := range new {
		nodes = append(nodes, ns.Node)
	}
	slices.Sort(nodes)
	for _, node := range slices.Compact(nodes) {
		was, is := find(old, node), find(new, node)
		if logged && t.awayDropped[node] {
			delete(t.away, node)
			continue
		}
		if t.away[node] == nil && len(is.Buckets) == 0 {
			continue
		}
		if logged {
			delete(t.away, node)
			w := t.awayWindow(node)
			w.merge(is)
			for _, d := range t.awayLog[node] { // logged before a Rebucket: moved since
				w.adjust(t.history.inWindows(d.Index, &t.slots, true), d.Value)
			}
		} else {
			t.awayWindow(node).replace(was, is)
		}
		if t.away[node].used() <= 0 {
			delete(t.away, node)
		}
	}
}

func (w *Window) replace(old, new WindowState) {
	if old.Width != w.width || new.Width != w.width {
		w.merge(new) // cannot line buckets up: only ever add
		return
	}
	for _, b := range old.Buckets {
		if w.live(b.Index) {
			w.adjust(b.Index, -b.Value)
		}
	}
	w.merge(new)
}

// Share is s with every bucket divided by n, rounded up: one node's share of
// another's usage, when n nodes split a limit.
func (s State) Share(n int64) State {
	if n <= 1 {
		return s
	}
	scale := func(ws WindowState) WindowState {
		out := WindowState{Width: ws.Width, Head: ws.Head, Buckets: make([]Bucket, len(ws.Buckets))}
		for i, b := range ws.Buckets {
			out.Buckets[i] = Bucket{Index: b.Index, Value: (b.Value + n - 1) / n}
		}
		return out
	}
	return State{Requests: scale(s.Requests), Tokens: scale(s.Tokens), Slots: scale(s.Slots)}
}

// Restrict leaves the tenant, for one window from now, at most 1/n of its
// request and token limits: it charges the newest bucket with what the
// windows would need to hold for that. It is the conservative budget of a
// new owner that can get no account of the tenant at all (its previous
// owner is gone and no snapshot can be had): whatever the previous owner
// admitted in the window before is unknown but at most the limit, so the
// cluster stays within (1 + 1/n) × the limit, where n is the member count
// the limit was shared by, and one window later the charge has left and
// the whole limit is back. It returns the requests and tokens charged.
func (t *Tenant) Restrict(now, n int64) (requests, tokens int64) {
	if n < 1 {
		n = 1
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	t.changed()
	return t.requests.restrict(n), t.tokens.restrict(n)
}

func (w *Window) restrict(n int64) int64 {
	if w.limit <= 0 {
		return 0
	}
	c := w.limit - w.limit/n - w.total
	if c <= 0 {
		return 0
	}
	w.charge(c)
	return c
}

// ChargeAt charges requests and tokens to the bucket that held time at (at
// most now): usage learnt of after the fact, such as another node's count
// read from its answers. Usage from before the window is not charged.
func (t *Tenant) ChargeAt(now, at, requests, tokens int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	t.changed()
	at = min(at, now)
	for _, c := range []struct {
		w *Window
		n int64
	}{{&t.requests, requests}, {&t.tokens, tokens}} {
		if b := at / c.w.width; c.n > 0 && c.w.live(b) {
			c.w.adjust(b, c.n)
		}
	}
}
