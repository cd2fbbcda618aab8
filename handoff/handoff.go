// Package handoff moves each tenant's limiter state with the tenant when the
// ring changes, so that its limits hold through every change. It owns the
// whole protocol:
//
//   - The previous owner freezes a tenant when it hands it over — on its own
//     ring change, or when the new owner asks first — and from then on
//     decides nothing for it (limiter.Decision.Moved): its router passes
//     such requests on to the new owner.
//   - The new owner holds the tenant's requests until it has the state: from
//     the previous owner over the peer channel (a join, a drain, a rolling
//     restart: no Redis needed); if that owner is gone, from the store (its
//     final snapshot for this change, or its last periodic one charged for
//     the gap at the tenant's peak rate); with neither, under a
//     conservative budget for one window (limiter.Tenant.Restrict). Every
//     path makes the windows authoritative again, so a tenant that comes
//     back to a node that once handed it over is never left frozen.
//   - Owners save their busy tenants to the store every interval, for crash
//     recovery.
//
// It knows nothing of HTTP, gossip or Redis: state travels through Peers and
// Store, and the node's tenants are reached through Tenants. InmemPeers and
// InmemStore are twins of the real ones for unit tests; NoStore is the store
// of a cluster without Redis.
package handoff

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/ring"
	"github.com/ringgate/ringgate/snapshot"
)

// Tenants is the node's tenants as the protocol moves them.
type Tenants interface {
	// Names are the configured tenants.
	Names() []string
	// Changed lists, once each, the tenants whose owner limiter changed
	// since it was made or last found empty (limiter.Tenant.ExportOrArm):
	// the periodic save looks at those, not at every configured tenant.
	Changed() []string
	// Limiter is the tenant's owner limiter, nil for an unknown tenant;
	// made if this node never counted the tenant.
	Limiter(name string) *limiter.Tenant
	// Counted is the tenant's owner limiter if this node ever counted the
	// tenant, else nil (and it is empty): a limiter is not worth making
	// for an empty state (a node configured with 100 000 tenants touches
	// few of them, and the first node of a cluster hands most over).
	Counted(name string) *limiter.Tenant
	// Freeze is Limiter(name).Freeze(now, to), false for an unknown
	// tenant, and MovedTo Limiter(name).MovedTo(); neither makes a
	// limiter for a tenant never counted.
	Freeze(name string, now int64, to string) (limiter.State, bool)
	MovedTo(name string) string
	// Thaw is Limiter(name).Thaw(), without making one.
	Thaw(name string)
	// Hold makes the tenant's requests wait, at most wait, until Release.
	Hold(name string, wait time.Duration) bool
	// Release applies the deltas that reached this node while the tenant
	// was held and lets its requests through.
	Release(name string)
	// Held reports whether the tenant's requests are held.
	Held(name string) bool
	// Owns reports whether the ring routing uses makes this node the
	// tenant's owner.
	Owns(name string) bool
	// OwnedWithin reports whether this node owns the tenant or owned it
	// within the last d: it holds state worth handing over.
	OwnedWithin(name string, d time.Duration) bool
	// Deciding reports whether this node decides for the tenants it owns
	// now: it has joined, holds a ring and is not catching up after a
	// pause (then its view of what it owns is stale, and so is what it
	// would save).
	Deciding() bool
}

// Status says what a previous owner did with a tenant asked for.
type Status uint8

const (
	// Handed: here is its state; the sender froze it and decides nothing
	// for it any more.
	Handed Status = iota + 1
	// NotHere: the sender neither owns it nor owned it within a window.
	NotHere
	// Moved: the sender handed it over to another node (Reply.To).
	Moved
	// Busy: the sender is itself still waiting for the tenant's state;
	// ask again.
	Busy
)

func (s Status) String() string {
	switch s {
	case Handed:
		return "handed"
	case NotHere:
		return "not_here"
	case Moved:
		return "moved"
	case Busy:
		return "busy"
	}
	return "unknown"
}

// Reply is a previous owner's answer about one tenant.
type Reply struct {
	Tenant string
	Status Status
	State  limiter.State // Handed
	To     string        // Moved
}

// Peers reaches the other nodes.
type Peers interface {
	// Fetch asks node to hand the named tenants over to this node. An
	// error means it could not be asked or did not answer: it may be
	// gone, and it may or may not have frozen them.
	Fetch(ctx context.Context, node string, tenants []string) ([]Reply, error)
	// Others are the other members that can be asked (draining ones
	// included), for a tenant its expected previous owner never had.
	Others() []string
}

// Store keeps snapshots for crash recovery (Redis; NoStore without).
type Store interface {
	SaveBatch(ctx context.Context, snaps []*snapshot.Snapshot, ttl time.Duration) error
	// LoadMany returns one snapshot (or nil: none) per name.
	LoadMany(ctx context.Context, names []string) ([]*snapshot.Snapshot, error)
}

// Config sets up a Mover. Zero values take the defaults below.
type Config struct {
	Self   string
	Window time.Duration // the limiter window
	// SnapshotInterval is how often busy owned tenants are saved.
	SnapshotInterval time.Duration
	// StoreTimeout bounds one store call.
	StoreTimeout time.Duration
	// FinalWait is how long a new owner whose previous owner is gone looks
	// for its final snapshot in the store.
	FinalWait time.Duration
	// FetchTimeout bounds asking a previous owner for its state.
	FetchTimeout time.Duration
	// ReconcileAfter is how long a tenant owned by the ring may stay
	// frozen for another node before it is taken back (Reconcile).
	ReconcileAfter time.Duration
	// Clock is the node's clock (Unix ns); nil is time.Now.
	Clock  func() int64
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultSnapshotInterval = time.Second
	DefaultStoreTimeout     = 15 * time.Millisecond
	DefaultFinalWait        = 100 * time.Millisecond
	DefaultFetchTimeout     = 250 * time.Millisecond
	DefaultReconcileAfter   = time.Second
	// lateFor is how long a new owner that continued from a stale snapshot
	// keeps looking for the final one.
	lateFor = 2 * time.Second
	// pollEvery is how often the store is polled for a final snapshot and
	// a busy previous owner asked again.
	pollEvery = 5 * time.Millisecond
	// maxFollow bounds how many Moved answers a take follows.
	maxFollow = 3
	// perTenantFetch is what each tenant asked for adds to FetchTimeout:
	// the previous owner freezes it, writes its final snapshot and encodes
	// it, the asker decodes and imports it (a few µs each, measured with
	// 20 000 tenants in one request), with room for a busy node.
	perTenantFetch = 25 * time.Microsecond
	// maxLoggedTenants bounds the tenant names one log line lists.
	maxLoggedTenants = 20
)

// fetchTimeout bounds asking a previous owner for tenants tenants.
func (m *Mover) fetchTimeout(tenants int) time.Duration {
	return m.cfg.FetchTimeout + time.Duration(tenants)*perTenantFetch
}

// Arrival counts how the state of the tenants a node took over arrived.
type Arrival struct {
	Peer, Final, Stale, Conservative, Fresh int
	Took                                    time.Duration
}

// Counts is the arrival as the rebalance log spells it.
func (a Arrival) Counts() map[string]int {
	return map[string]int{"peer": a.Peer, "redis_snapshot": a.Final, "stale_redis_snapshot": a.Stale,
		"conservative": a.Conservative, "fresh": a.Fresh}
}

func (a *Arrival) add(b Arrival) {
	a.Peer += b.Peer
	a.Final += b.Final
	a.Stale += b.Stale
	a.Conservative += b.Conservative
	a.Fresh += b.Fresh
}

// Mover runs the protocol for one node.
type Mover struct {
	cfg     Config
	tenants Tenants
	peers   Peers
	store   Store
	log     *slog.Logger
	ttl     time.Duration

	current func() *ring.Ring // the ring routing uses

	saveMu sync.Mutex // one save at a time: a periodic save never lands after a final
	mu     sync.Mutex
	empty  map[string]bool // tenant → whether its last saved state was empty
	// watch are the tenants that may hold state: changed since last found
	// empty (Tenants.Changed). Only SaveOwned uses it (under saveMu).
	watch map[string]struct{}
	// frozen are the tenants this node owns by its ring but had frozen
	// for another node when it last looked (a peer with another ring
	// asked for them, or a change gave them back while they were frozen):
	// the only ones Reconcile looks at. frozenOwn: since when each has
	// been so.
	frozen    map[string]struct{}
	frozenOwn map[string]time.Time
	// takingBack are the tenants TakeBack is fetching, closed when done:
	// the requests bouncing meanwhile wait for it rather than start a
	// second fetch, and Reconcile leaves them alone.
	takingBack map[string]chan struct{}

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// New returns a Mover; Start begins the periodic saves. current is the ring
// routing uses (nil: standalone).
func New(cfg Config, tenants Tenants, peers Peers, store Store, current func() *ring.Ring) *Mover {
	if cfg.SnapshotInterval <= 0 {
		cfg.SnapshotInterval = DefaultSnapshotInterval
	}
	if cfg.StoreTimeout <= 0 {
		cfg.StoreTimeout = DefaultStoreTimeout
	}
	if cfg.FinalWait <= 0 {
		cfg.FinalWait = DefaultFinalWait
	}
	if cfg.FetchTimeout <= 0 {
		cfg.FetchTimeout = DefaultFetchTimeout
	}
	if cfg.ReconcileAfter <= 0 {
		cfg.ReconcileAfter = DefaultReconcileAfter
	}
	if cfg.Clock == nil {
		cfg.Clock = func() int64 { return time.Now().UnixNano() }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if store == nil {
		store = NoStore{}
	}
	if current == nil {
		current = func() *ring.Ring { return nil }
	}
	return &Mover{
		cfg: cfg, tenants: tenants, peers: peers, store: store, log: cfg.Logger, current: current,
		// A snapshot outlives the window a little, and tenants holding
		// slots are saved every interval, so it never expires under a
		// running stream.
		ttl:       cfg.Window + 2*cfg.SnapshotInterval + time.Second,
		empty:     make(map[string]bool),
		watch:     make(map[string]struct{}),
		frozen:    make(map[string]struct{}),
		frozenOwn: make(map[string]time.Time),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
}

// Start begins saving the owned busy tenants every interval (only with a
// real store).
func (m *Mover) Start() {
	_, none := m.store.(NoStore)
	go func() {
		defer close(m.done)
		save := time.NewTicker(m.cfg.SnapshotInterval)
		defer save.Stop()
		check := time.NewTicker(reconcileEvery)
		defer check.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-save.C:
				if none {
					m.tenants.Changed() // nothing saves them: keep the list short
				} else {
					m.SaveOwned()
				}
			case <-check.C:
				m.Reconcile()
			}
		}
	}()
}

// Reconciling: a tenant this node owns by its ring but has frozen for
// another node, for longer than rings take to agree, is taken back from
// that node. It mends what two changes in a row can leave behind (two nodes
// each frozen for the other, every request bouncing between them). The
// wait (Config.ReconcileAfter) is longer than rings take to agree, so a
// node whose ring is merely behind does not pull a tenant back.
const reconcileEvery = 200 * time.Millisecond

// Reconcile takes back the tenants this node owns by its ring that have
// stayed frozen for another node past Config.ReconcileAfter.
func (m *Mover) Reconcile() {
	if !m.tenants.Deciding() {
		return
	}
	now := time.Now()
	var back map[string][]string
	m.mu.Lock()
	for name := range m.frozen {
		if _, taking := m.takingBack[name]; taking {
			continue // TakeBack has it in hand
		}
		to := m.tenants.MovedTo(name)
		if to == "" || to == m.cfg.Self || !m.tenants.Owns(name) {
			// Taken back, gone from the config, or no longer ours: a
			// change that gives it back lists it again.
			delete(m.frozen, name)
			delete(m.frozenOwn, name)
			continue
		}
		if m.tenants.Held(name) {
			delete(m.frozenOwn, name)
			continue
		}
		first, seen := m.frozenOwn[name]
		switch {
		case !seen:
			m.frozenOwn[name] = now
		case now.Sub(first) >= m.cfg.ReconcileAfter:
			delete(m.frozenOwn, name)
			if back == nil {
				back = make(map[string][]string)
			}
			back[to] = append(back[to], name)
		}
	}
	m.mu.Unlock()
	r := m.current()
	for from, names := range back {
		for _, t := range names {
			m.tenants.Hold(t, m.GateWait(len(names)))
		}
		a := m.takeFrom(from, names, r, int64(max(r.Len(), 2)))
		m.log.Warn("handoff", "phase", "reconciled", "from", from, "tenants", len(names), "state", a.Counts())
	}
}

// TakeBack takes a tenant this node owns by its ring but has frozen for
// other back from it at once, without Reconcile's wait: other has just
// passed a request for it here, so it holds the tenant frozen for this
// node and its ring agrees this node has it (each frozen for the other,
// every request bounces between them until one takes the tenant back). A
// take already under way is waited for. It reports whether it took the
// tenant or waited for a take (not: not ours, not frozen for other, or
// held for another take).
func (m *Mover) TakeBack(name, other string) bool {
	if !m.tenants.Deciding() || m.tenants.MovedTo(name) != other || other == m.cfg.Self || !m.tenants.Owns(name) {
		return false
	}
	m.mu.Lock()
	if done, ok := m.takingBack[name]; ok {
		m.mu.Unlock()
		timer := time.NewTimer(m.GateWait(1))
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.C:
		}
		return true
	}
	if m.tenants.Held(name) {
		m.mu.Unlock()
		return false // a ring change or Reconcile is taking it
	}
	if m.takingBack == nil {
		m.takingBack = make(map[string]chan struct{})
	}
	done := make(chan struct{})
	m.takingBack[name] = done
	delete(m.frozenOwn, name)
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.takingBack, name)
		m.mu.Unlock()
		close(done)
	}()
	m.tenants.Hold(name, m.GateWait(1))
	// Only other's own hand-over is taken: busy (its ring gave it the
	// tenant, and it is asking this node for it), moved on, unreachable,
	// the tenant stays frozen for other, as it was, and Reconcile or
	// other's take settles it. Taken from the store or a third node, a
	// take crossing other's would leave both deciding.
	replies, err := m.fetch(other, []string{name}, time.Now().Add(m.fetchTimeout(1)))
	took := err == nil && len(replies) == 1 && replies[0].Status == Handed && replies[0].Tenant == name
	if took {
		m.importState(name, replies[0].State) // releases the hold
		m.log.Warn("handoff", "phase", "reconciled", "from", other, "tenants", 1, "state", map[string]int{"peer": 1}, "reason", "bounced")
	} else {
		m.tenants.Release(name)
	}
	return took
}

// noteFrozen lists for Reconcile a tenant this node owns by its ring but
// has frozen for another node.
func (m *Mover) noteFrozen(name string) {
	m.mu.Lock()
	m.frozen[name] = struct{}{}
	m.mu.Unlock()
}

// Close stops the periodic saves and the late-final watchers.
func (m *Mover) Close() {
	m.closeOnce.Do(func() { close(m.stop) })
	<-m.done
}

// GateWait is how long a gained tenant's requests may be held: long enough
// for the whole of a take (asking the previous owner, the store's final
// wait, a last load), so a held request never times out into a window that
// is then replaced.
func (m *Mover) GateWait(tenants int) time.Duration {
	perCall := m.cfg.StoreTimeout + time.Duration(tenants)*40*time.Microsecond
	return m.fetchTimeout(tenants) + m.cfg.FinalWait + 3*perCall + 100*time.Millisecond
}

// Change moves the tenants whose owner differs between from and to, on the
// node's ring change: it holds the tenants this node gains, calls publish
// (the node switches routing to the new ring), hands over the tenants it
// lost and takes over the ones it gained. It returns how many it handed
// over and how the state of the others arrived.
func (m *Mover) Change(from, to *ring.Ring, publish func()) (lost, gained []string, a Arrival) {
	self := m.cfg.Self
	for _, t := range ring.Moved(from, to, m.tenants.Names()) {
		was, _ := from.Owner(t)
		is, _ := to.Owner(t)
		switch {
		case was == self && is != self:
			lost = append(lost, t)
		case is == self && was != self:
			gained = append(gained, t)
		}
	}
	wait := m.GateWait(max(len(lost), len(gained)))
	for _, t := range gained {
		m.tenants.Hold(t, wait)
	}
	if publish != nil {
		publish()
	}
	m.HandOverLost(lost, to)
	a = m.Take(gained, from, to)
	for _, name := range gained {
		if m.tenants.MovedTo(name) != "" {
			m.noteFrozen(name) // ours again, still frozen for another
		}
	}
	return lost, gained, a
}

// HandOverLost freezes the tenants this node just lost by its own ring, each
// handed to its owner in to, and writes their final snapshots to the store
// (for the case the new owner dies before it asks). A tenant a new owner
// already asked for is left as it is.
func (m *Mover) HandOverLost(lost []string, to *ring.Ring) {
	if len(lost) == 0 {
		return
	}
	deciding := m.tenants.Deciding() // catching up after a pause: its state is stale, freeze only
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	now := m.cfg.Clock()
	batch := make([]*snapshot.Snapshot, 0, len(lost))
	for _, name := range lost {
		if m.tenants.MovedTo(name) != "" {
			continue
		}
		owner, _ := to.Owner(name)
		st, known := m.tenants.Freeze(name, now, owner)
		if !known {
			continue
		}
		batch = append(batch, &snapshot.Snapshot{Tenant: name, Writer: m.cfg.Self, WrittenAt: now,
			RingHash: to.Hash(), Final: true, State: st})
	}
	if !deciding {
		return
	}
	if err := m.save(batch); err != nil {
		m.log.Debug("handoff", "phase", "final", "tenants", len(batch), "error", err.Error())
	}
}

// HandOver answers a node that asks for tenants it believes it now owns:
// each one this node counts is frozen, handed to the asker and its state
// returned. It is the previous owner's side of Take.
func (m *Mover) HandOver(asker string, names []string) []Reply {
	out := make([]Reply, len(names))
	now := m.cfg.Clock()
	for i, name := range names {
		out[i] = Reply{Tenant: name, Status: NotHere} // also for an unknown tenant
		moved := m.tenants.MovedTo(name)
		switch {
		case m.tenants.Held(name):
			out[i].Status = Busy
		case moved != "" && moved != asker:
			out[i] = Reply{Tenant: name, Status: Moved, To: moved}
		case moved == asker && !m.tenants.OwnedWithin(name, m.cfg.Window):
			// Frozen for the asker more than a window ago and not owned
			// since: the asker has owned the tenant ever since (it asks
			// again after its ring stepped out and back, a pause): this
			// old state would replace its own, newer account.
		case moved == asker || m.tenants.OwnedWithin(name, m.cfg.Window):
			// Asked twice (the first answer was lost), or ours: the
			// state as of now, frozen for the asker.
			st, known := m.tenants.Freeze(name, now, asker)
			if !known {
				break
			}
			out[i] = Reply{Tenant: name, Status: Handed, State: st}
			if m.tenants.Owns(name) {
				m.noteFrozen(name) // an asker whose ring is not ours
			}
		}
	}
	m.saveFinals(asker, out, now)
	return out
}

// saveFinals writes what HandOver handed over as final snapshots too: if
// the answer is lost on its way, the asker finds them in the store.
func (m *Mover) saveFinals(asker string, out []Reply, now int64) {
	if _, none := m.store.(NoStore); none || !m.tenants.Deciding() {
		return
	}
	var batch []*snapshot.Snapshot
	hash := m.current().Hash()
	for _, r := range out {
		// An empty state too: lost with the answer, the asker would
		// otherwise find an older snapshot (a finished call's slot, say)
		// and hold the tenant to it.
		if r.Status == Handed {
			// The asker accepts a recent final from the node it asked,
			// whatever ring this node stamps it with (fromStore).
			batch = append(batch, &snapshot.Snapshot{Tenant: r.Tenant, Writer: m.cfg.Self, WrittenAt: now, RingHash: hash, Final: true, State: r.State})
		}
	}
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	if err := m.save(batch); err != nil {
		m.log.Debug("handoff", "phase", "final", "tenants", len(batch), "asker", asker, "error", err.Error())
	}
}

// previousOwner is the node that held the tenant before to: its owner in
// from, or, on a node's first ring (from is empty: it just joined), its
// owner among the other members. "" when nobody could have held it (a
// cluster starting).
func previousOwner(from, to *ring.Ring, self, tenant string, others *ring.Ring) string {
	if from.Len() > 0 {
		o, _ := from.Owner(tenant)
		return o
	}
	o, _ := others.Owner(tenant)
	return o
}

// Take loads the state of the tenants this node just gained, whose requests
// are held, and releases each as soon as its state is in: from the
// previous owner; if it cannot be asked, from the store; else under the
// conservative budget. Tenants nobody could have held start from what this
// node counts.
func (m *Mover) Take(gained []string, from, to *ring.Ring) Arrival {
	start := time.Now()
	var a Arrival
	if len(gained) == 0 {
		return a
	}
	var others *ring.Ring
	if from.Len() == 0 {
		var ms []string
		for _, n := range to.Members() {
			if n != m.cfg.Self {
				ms = append(ms, n)
			}
		}
		others = ring.New(0, ms).WithPins(to.Pins()) // placed as to places them
	}
	byPrev := make(map[string][]string)
	for _, t := range gained {
		prev := previousOwner(from, to, m.cfg.Self, t, others)
		if prev == m.cfg.Self {
			prev = ""
		}
		byPrev[prev] = append(byPrev[prev], t)
	}
	n := int64(max(from.Len(), to.Len(), 2))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for prev, names := range byPrev {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b Arrival
			if prev == "" {
				for _, t := range names {
					m.tenants.Thaw(t)
					m.tenants.Release(t)
					b.Fresh++
				}
			} else {
				b = m.takeFrom(prev, names, to, n)
			}
			mu.Lock()
			a.add(b)
			mu.Unlock()
		}()
	}
	wg.Wait()
	a.Took = time.Since(start)
	return a
}

// takeFrom takes names over from prev, following Moved answers. A tenant
// prev never had (the guess of a node's first ring can be wrong: another
// node joining at the same time, an owner draining meanwhile) is asked of
// every other member before anyone concludes that nobody had it.
func (m *Mover) takeFrom(prev string, names []string, to *ring.Ring, n int64) Arrival {
	var a Arrival
	deadline := time.Now().Add(m.fetchTimeout(len(names)))
	asked := map[string]bool{}
	unreachable, notHere := m.ask(map[string][]string{prev: names}, deadline, asked, &a)
	if len(notHere) > 0 {
		var others []string
		for _, o := range m.peers.Others() {
			if o != m.cfg.Self && !asked[o] {
				others = append(others, o)
			}
		}
		if len(others) > 0 {
			notHere = m.askAll(others, notHere, deadline, &unreachable, &a)
		}
	}
	if len(unreachable) > 0 || len(notHere) > 0 {
		a.add(m.fromStore(prev, unreachable, notHere, to, n))
	}
	return a
}

// ask fetches the tenants of each node of ask, following Moved answers, and
// imports what is handed over. It returns the tenants whose node could not
// answer (or stayed busy) and those nobody asked had.
func (m *Mover) ask(ask map[string][]string, deadline time.Time, asked map[string]bool, a *Arrival) (unreachable, notHere []string) {
	for follow := 0; len(ask) > 0; follow++ {
		next := make(map[string][]string)
		for node, ns := range ask {
			if follow > maxFollow || node == m.cfg.Self {
				unreachable = append(unreachable, ns...)
				continue
			}
			asked[node] = true
			replies, err := m.fetch(node, ns, deadline)
			if err != nil && time.Now().Before(deadline) {
				// Once more: an answer lost on its way is handed again
				// (HandOver answers the same asker twice).
				replies, err = m.fetch(node, ns, deadline)
			}
			if err != nil {
				m.log.Info("handoff", "phase", "peer_unreachable", "peer", node, "tenants", len(ns), "error", err.Error())
				unreachable = append(unreachable, ns...)
				continue
			}
			for _, r := range replies {
				switch r.Status {
				case Handed:
					m.importState(r.Tenant, r.State)
					a.Peer++
				case Moved:
					next[r.To] = append(next[r.To], r.Tenant)
				case Busy:
					unreachable = append(unreachable, r.Tenant)
				default:
					notHere = append(notHere, r.Tenant)
				}
			}
		}
		ask = next
	}
	return unreachable, notHere
}

// askAll asks every node of others, at once, for the tenants; it returns
// those none of them had. One that does not answer leaves its tenants in
// doubt: they join unreachable unless another node handed them over.
func (m *Mover) askAll(others, names []string, deadline time.Time, unreachable *[]string, a *Arrival) []string {
	type answer struct {
		node    string
		replies []Reply
		err     error
	}
	answers := make(chan answer, len(others))
	for _, o := range others {
		go func() {
			rs, err := m.fetch(o, names, deadline)
			answers <- answer{o, rs, err}
		}()
	}
	handed := map[string]bool{}
	doubt := map[string]bool{}
	moved := map[string][]string{}
	for range others {
		an := <-answers
		if an.err != nil {
			for _, t := range names {
				doubt[t] = true
			}
			continue
		}
		for _, r := range an.replies {
			switch r.Status {
			case Handed:
				if !handed[r.Tenant] {
					handed[r.Tenant] = true
					m.importState(r.Tenant, r.State)
					a.Peer++
				}
			case Moved:
				moved[r.To] = append(moved[r.To], r.Tenant)
			case Busy:
				doubt[r.Tenant] = true
			}
		}
	}
	follow := map[string][]string{}
	for to, ts := range moved {
		for _, t := range ts {
			if !handed[t] && !slices.Contains(follow[to], t) {
				follow[to] = append(follow[to], t)
				handed[t] = true // asked on; the follow decides
			}
		}
	}
	if len(follow) > 0 {
		u, nh := m.ask(follow, deadline, map[string]bool{}, a)
		*unreachable = append(*unreachable, u...)
		*unreachable = append(*unreachable, nh...) // someone had it: not "nobody"
	}
	var none []string
	for _, t := range names {
		switch {
		case handed[t]:
		case doubt[t]:
			*unreachable = append(*unreachable, t)
		default:
			none = append(none, t)
		}
	}
	return none
}

// fetch asks node for ns, asking again those it is busy with until the
// deadline.
func (m *Mover) fetch(node string, ns []string, deadline time.Time) ([]Reply, error) {
	var out []Reply
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		replies, err := m.peers.Fetch(ctx, node, ns)
		cancel()
		if err != nil {
			if len(out) > 0 {
				// Some were handed already: the rest count as busy.
				for _, t := range ns {
					out = append(out, Reply{Tenant: t, Status: Busy})
				}
				return out, nil
			}
			return nil, err
		}
		var busy []string
		for _, r := range replies {
			if r.Status == Busy {
				busy = append(busy, r.Tenant)
			} else {
				out = append(out, r)
			}
		}
		if len(busy) == 0 || time.Now().Add(pollEvery).After(deadline) {
			for _, t := range busy {
				out = append(out, Reply{Tenant: t, Status: Busy})
			}
			return out, nil
		}
		ns = busy
		time.Sleep(pollEvery)
	}
}

// fromStore takes over tenants whose previous owner could not hand them
// over. unreachable ones: the previous owner is gone (or stuck), so its
// final snapshot for this change is waited for a little, then its last
// periodic one is continued with the gap charged; without any, the
// conservative budget. notHere ones: the node asked never had them; a
// snapshot is used if there is one, else they start fresh.
func (m *Mover) fromStore(prev string, unreachable, notHere []string, to *ring.Ring, n int64) Arrival {
	var a Arrival
	gone := make(map[string]bool, len(unreachable))
	pending := make(map[string]*snapshot.Snapshot)
	for _, t := range unreachable {
		gone[t] = true
		pending[t] = nil
	}
	for _, t := range notHere {
		pending[t] = nil
	}
	failed := false
	deadline := time.Now().Add(m.cfg.FinalWait)
	// A final for the same member set may be left from an earlier change;
	// the previous owner writes this change's at most a gossip round before
	// this node sees it.
	recent := m.cfg.Clock() - int64(2*time.Second)
	for len(pending) > 0 {
		names := keys(pending)
		snaps, err := m.loadMany(names)
		failed = err != nil
		if err == nil {
			for i, name := range names {
				s := snaps[i]
				// A final of this change from the tenant's previous owner:
				// written when it lost the tenant by its own ring (stamped
				// with that ring) or when it answered this node's request
				// (the answer may have been lost). Recent, so not one left
				// from an earlier change.
				if s != nil && s.Final && s.Writer == prev && s.WrittenAt > recent {
					m.importState(name, m.held(s))
					delete(pending, name)
					a.Final++
					continue
				}
				if s != nil && s.Final && s.Writer != prev {
					// Another node's hand-over (two changes in a row):
					// not an account of what prev did.
					s = nil
				}
				pending[name] = s
			}
		}
		// Only a gone owner's final is worth waiting for.
		waiting := false
		for name := range pending {
			waiting = waiting || gone[name]
		}
		if _, none := m.store.(NoStore); none || !waiting || time.Now().After(deadline) {
			break
		}
		time.Sleep(pollEvery)
	}
	stale := make(map[string]limiter.State)
	var conservative []string
	for name, s := range pending {
		fresh := s == nil && !gone[name] && !failed
		var lim *limiter.Tenant
		if !fresh {
			lim = m.tenants.Limiter(name)
		}
		switch {
		case fresh:
			m.tenants.Thaw(name)
			a.Fresh++
		case lim == nil:
		case s != nil:
			now := m.cfg.Clock()
			lim.Import(now, m.held(s))
			lim.ChargeGap(now, s.State)
			// The snapshot may predate a burst (an idle tenant's is
			// empty): never less than the conservative budget. The
			// slots of its calls go once its node is known to be gone
			// (Release drops them then), not because it did not answer.
			lim.Restrict(now, n)
			stale[name] = lim.Export(now)
			a.Stale++
		default: // gone[name] || failed
			// No account of the tenant can be had: its previous owner
			// may have admitted up to the whole limit just now.
			now := m.cfg.Clock()
			lim.Import(now, limiter.State{})
			lim.Restrict(now, n)
			a.Conservative++
			conservative = append(conservative, name)
		}
		m.tenants.Release(name)
	}
	if len(conservative) > 0 {
		// One line for them all (a change can move 20 000 tenants).
		slices.Sort(conservative)
		sample := conservative[:min(len(conservative), maxLoggedTenants)]
		m.log.Warn("handoff", "phase", "conservative", "from", prev, "budget_share", n,
			"tenants", len(conservative), "sample", sample)
	}
	if len(stale) > 0 {
		go m.awaitLateFinals(prev, stale, to)
	}
	return a
}

// importState makes st (st.Holder's account) the tenant's state here and
// lets its requests through. Release also forgets the slots of calls on
// nodes that are gone.
func (m *Mover) importState(name string, st limiter.State) {
	lim := m.tenants.Counted(name)
	if lim == nil && !st.Empty() {
		lim = m.tenants.Limiter(name)
	}
	if lim != nil {
		lim.Import(m.cfg.Clock(), st.As(m.cfg.Self))
	} else {
		m.tenants.Thaw(name) // never counted here, handed empty: nothing to import
	}
	m.tenants.Release(name)
}

// held is a snapshot's state as this node holds it: the writer's slots are
// the writer's calls.
func (m *Mover) held(s *snapshot.Snapshot) limiter.State {
	st := s.State
	st.Holder = s.Writer
	return st.As(m.cfg.Self)
}

// awaitLateFinals keeps looking, for a while, for the final snapshots that
// missed the wait; one that arrives replaces the stale state and gap
// estimate the tenant was continued from.
func (m *Mover) awaitLateFinals(prev string, base map[string]limiter.State, to *ring.Ring) {
	recent := m.cfg.Clock() - int64(m.cfg.FinalWait+2*time.Second)
	deadline := time.Now().Add(lateFor)
	for len(base) > 0 && time.Now().Before(deadline) {
		select {
		case <-m.stop:
			return
		case <-time.After(4 * pollEvery):
		}
		if m.current() != to {
			return // the ring moved on; a newer handoff is in charge
		}
		names := keys(base)
		snaps, err := m.loadMany(names)
		if err != nil {
			continue
		}
		for i, name := range names {
			s, st := snaps[i], base[name]
			if s == nil || !s.Final || s.Writer != prev || s.WrittenAt < recent {
				continue
			}
			if lim := m.tenants.Limiter(name); lim != nil {
				lim.Replace(m.cfg.Clock(), st, m.held(s))
			}
			delete(base, name)
			m.log.Info("handoff", "phase", "late_final", "tenant", name, "from", s.Writer)
		}
	}
}

// SaveOwned writes, in one round trip, the tenants this node owns whose
// windows hold anything (or just emptied). It looks only at the tenants
// that changed since they were last found empty (watch), so its cost is
// what the node serves, not what it is configured with. Saving a busy tenant every
// interval, changed or not, keeps its snapshot at most an interval old: a
// new owner that has only this snapshot charges the time since it at the
// peak rate.
func (m *Mover) SaveOwned() {
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	for _, name := range m.tenants.Changed() {
		m.watch[name] = struct{}{}
	}
	if !m.tenants.Deciding() {
		return
	}
	r := m.current()
	now := m.cfg.Clock()
	var batch []*snapshot.Snapshot
	for name := range m.watch {
		lim := m.tenants.Limiter(name)
		if lim == nil {
			delete(m.watch, name) // gone from the config
			m.mu.Lock()
			delete(m.empty, name)
			m.mu.Unlock()
			continue
		}
		if m.tenants.Held(name) {
			continue // ours, but its state is still on its way
		}
		if !m.tenants.Owns(name) || lim.MovedTo() != "" {
			// Not ours to save: watched while it holds anything.
			if _, empty := lim.ExportOrArm(now); empty {
				delete(m.watch, name)
			}
			continue
		}
		st, empty := lim.ExportOrArm(now)
		m.mu.Lock()
		wasEmpty, seen := m.empty[name]
		m.mu.Unlock()
		if empty && (!seen || wasEmpty) {
			delete(m.watch, name) // its next change lists it again
			m.mu.Lock()
			delete(m.empty, name)
			m.mu.Unlock()
			continue
		}
		batch = append(batch, &snapshot.Snapshot{Tenant: name, Writer: m.cfg.Self, WrittenAt: now, RingHash: r.Hash(), State: st})
	}
	if len(batch) == 0 || m.save(batch) != nil {
		return
	}
	m.mu.Lock()
	for _, s := range batch {
		m.empty[s.Tenant] = s.State.Empty()
	}
	m.mu.Unlock()
}

// Flush writes final snapshots of the named tenants (a standalone node
// stopping: the next process on this config continues from them).
func (m *Mover) Flush(names []string) error {
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	now := m.cfg.Clock()
	var batch []*snapshot.Snapshot
	for _, name := range names {
		// A tenant this process never counted has no snapshot to follow:
		// it had none when it started (Restore makes the state of one
		// that had).
		if lim := m.tenants.Counted(name); lim != nil {
			batch = append(batch, &snapshot.Snapshot{Tenant: name, Writer: m.cfg.Self, WrittenAt: now, Final: true, State: lim.Export(now)})
		}
	}
	return m.save(batch)
}

// Restore continues a standalone node's tenants from their last snapshots,
// before it serves.
func (m *Mover) Restore(names []string) Arrival {
	start := time.Now()
	var a Arrival
	snaps, err := m.loadMany(names)
	for i, name := range names {
		var s *snapshot.Snapshot
		if err == nil {
			s = snaps[i]
		}
		if s == nil {
			a.Fresh++ // its state is made at its first use
			continue
		}
		lim := m.tenants.Limiter(name)
		if lim == nil {
			continue
		}
		// This process is new: no call of the one that wrote the
		// snapshot is still running.
		s.State.Slots, s.State.Away = limiter.WindowState{}, nil
		switch {
		case s.Final:
			lim.Import(m.cfg.Clock(), s.State)
			a.Final++
		default:
			now := m.cfg.Clock()
			lim.Import(now, s.State)
			lim.ChargeGap(now, s.State)
			a.Stale++
		}
	}
	a.Took = time.Since(start)
	return a
}

// LastState is a tenant's last snapshot, whatever wrote it, for seeding a
// fallback share while its owner is unreachable.
func (m *Mover) LastState(tenant string) (limiter.State, bool) {
	snaps, err := m.loadMany([]string{tenant})
	if err != nil || snaps[0] == nil {
		return limiter.State{}, false
	}
	return snaps[0].State, true
}

func (m *Mover) save(batch []*snapshot.Snapshot) error {
	if len(batch) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StoreTimeout+time.Duration(len(batch))*20*time.Microsecond)
	defer cancel()
	return m.store.SaveBatch(ctx, batch, m.ttl)
}

func (m *Mover) loadMany(names []string) ([]*snapshot.Snapshot, error) {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StoreTimeout+time.Duration(len(names))*20*time.Microsecond)
	defer cancel()
	return m.store.LoadMany(ctx, names)
}

// keys lists a pending set's tenants.
func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
