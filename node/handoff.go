package node

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/ring"
	"github.com/ringgate/ringgate/router"
	"github.com/ringgate/ringgate/snapshot"
)

// handoff keeps tenants' limits across ring changes through Redis
// snapshots: it saves the state of the tenants this node owns periodically
// and, when one moves away, at once (a final snapshot); when a tenant moves
// here, it holds the tenant's requests until the state is loaded, waiting a
// bounded time for the previous owner's final snapshot and otherwise
// continuing from the last periodic one, charged for the gap at the
// tenant's recent peak rate.
type handoff struct {
	store    *snapshot.Store
	router   *router.Router
	log      *slog.Logger
	self     string
	interval time.Duration
	wait     time.Duration // for a final snapshot, per change
	late     time.Duration // for a final snapshot that missed wait
	ttl      time.Duration
	timeout  time.Duration // one Redis call
	current  func() *ring.Ring
	tenants  func() []string

	saveMu sync.Mutex // one save at a time: a periodic save never lands after a final
	mu     sync.Mutex
	empty  map[string]bool // tenant → whether its last saved state was empty

	stop chan struct{}
	done chan struct{}
}

func newHandoff(cfg *config.Config, store *snapshot.Store, rt *router.Router, log *slog.Logger,
	current func() *ring.Ring, tenants func() []string) *handoff {
	interval := cfg.Redis.SnapshotInterval
	if interval <= 0 {
		interval = time.Second
	}
	timeout := cfg.Redis.Timeout
	if timeout <= 0 {
		timeout = 15 * time.Millisecond
	}
	return &handoff{
		store: store, router: rt, log: log, self: cfg.Node.Name,
		interval: interval,
		wait:     cfg.Redis.HandoffWait,
		late:     2 * time.Second,
		// A snapshot outlives the window a little, and tenants holding
		// slots are saved every interval, so it never expires under a
		// running stream.
		ttl:     cfg.Limits.Window + 2*interval + time.Second,
		timeout: timeout,
		current: current, tenants: tenants,
		empty: make(map[string]bool),
	}
}

// lastState is a tenant's last snapshot, whatever wrote it, for seeding a
// fallback share while its owner is unreachable.
func (h *handoff) lastState(tenant string) (limiter.State, bool) {
	snaps, err := h.loadMany([]string{tenant})
	if err != nil || snaps[0] == nil {
		return limiter.State{}, false
	}
	return snaps[0].State, true
}

// collectors expose the store's counters as Prometheus counters.
func (h *handoff) collectors() []prometheus.Collector {
	stat := func(name, help string, v func(snapshot.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ringgate_snapshot_" + name, Help: help},
			func() float64 { return float64(v(h.store.Stats())) })
	}
	return []prometheus.Collector{
		stat("saved_total", "Tenant snapshots written to Redis.", func(s snapshot.Stats) uint64 { return s.Saved }),
		stat("save_failures_total", "Snapshot batches that failed or timed out.", func(s snapshot.Stats) uint64 { return s.SaveFailures }),
		stat("skipped_total", "Redis calls skipped while Redis was failing.", func(s snapshot.Stats) uint64 { return s.Skipped }),
		stat("loaded_total", "Tenant snapshots read from Redis.", func(s snapshot.Stats) uint64 { return s.Loaded }),
		stat("load_failures_total", "Snapshot loads that failed or timed out.", func(s snapshot.Stats) uint64 { return s.LoadFailures }),
		stat("decode_errors_total", "Values under a snapshot key that did not decode.", func(s snapshot.Stats) uint64 { return s.DecodeErrors }),
	}
}

// gateWait is how long a gained tenant's requests may be held: long enough
// for the whole of onRing's handoff (flush, the wait, a last load), so a
// held request never times out into a window that is then replaced.
func (h *handoff) gateWait(lost, gained int) time.Duration {
	perCall := h.timeout + time.Duration(max(lost, gained))*40*time.Microsecond
	return h.wait + 3*perCall + 100*time.Millisecond
}

// pollEvery is how often a new owner looks for the final snapshot.
const pollEvery = 5 * time.Millisecond

// arrival says how a moved tenant's state reached its new owner.
type arrival struct {
	Final, Stale, None, Failed int
	Took                       time.Duration
}

func (h *handoff) start() {
	h.stop, h.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(h.done)
		tick := time.NewTicker(h.interval)
		defer tick.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-tick.C:
				h.saveOwned()
			}
		}
	}()
}

func (h *handoff) close() {
	close(h.stop)
	<-h.done
	_ = h.store.Close()
}

// saveOwned writes, in one round trip, the tenants this node owns whose
// windows hold anything (or just emptied). Saving a busy tenant every
// interval, changed or not, keeps its snapshot at most an interval old: a
// new owner that has only this snapshot charges the time since it at the
// peak rate, so an old one would cost an idle tenant a whole window.
func (h *handoff) saveOwned() {
	// Not while a final snapshot is written: this save could land after
	// it and bury it.
	h.saveMu.Lock()
	defer h.saveMu.Unlock()
	if !h.router.Ready() {
		return // not joined yet: its view of who owns what is its own
	}
	r := h.current()
	now := time.Now().UnixNano()
	var batch []*snapshot.Snapshot
	for _, name := range h.tenants() {
		if !h.router.Owns(name) || h.router.Held(name) {
			continue // not ours, or ours but its state is still on its way
		}
		lim := h.router.Limiter(name)
		if lim == nil {
			continue
		}
		st := lim.Export(now)
		h.mu.Lock()
		wasEmpty, seen := h.empty[name]
		h.mu.Unlock()
		if st.Empty() && (!seen || wasEmpty) {
			continue
		}
		batch = append(batch, &snapshot.Snapshot{Tenant: name, Writer: h.self, WrittenAt: now, RingHash: r.Hash(), State: st})
	}
	if len(batch) == 0 || h.save(batch) != nil {
		return
	}
	h.mu.Lock()
	for _, s := range batch {
		h.empty[s.Tenant] = s.State.Empty()
	}
	h.mu.Unlock()
}

func (h *handoff) save(batch []*snapshot.Snapshot) error {
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout+time.Duration(len(batch))*20*time.Microsecond)
	defer cancel()
	err := h.store.SaveBatch(ctx, batch, h.ttl)
	if err != nil {
		h.log.Debug("snapshot", "phase", "save", "tenants", len(batch), "error", err.Error())
	}
	return err
}

// loadMany loads the named tenants' snapshots in one round trip.
func (h *handoff) loadMany(names []string) ([]*snapshot.Snapshot, error) {
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout+time.Duration(len(names))*20*time.Microsecond)
	defer cancel()
	return h.store.LoadMany(ctx, names)
}

// keys lists a pending set's tenants.
func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// flush writes final snapshots of the tenants this node just lost: from now
// on it forwards their requests, so the state it hands over is complete.
func (h *handoff) flush(lost []string, to *ring.Ring) error {
	if len(lost) == 0 {
		return nil
	}
	h.saveMu.Lock()
	defer h.saveMu.Unlock()
	now := time.Now().UnixNano()
	batch := make([]*snapshot.Snapshot, 0, len(lost))
	for _, name := range lost {
		if lim := h.router.Limiter(name); lim != nil {
			batch = append(batch, &snapshot.Snapshot{Tenant: name, Writer: h.self, WrittenAt: now,
				RingHash: to.Hash(), Final: true, State: lim.Freeze(now)})
		}
	}
	return h.save(batch)
}

// take loads the state of the tenants this node just gained, whose requests
// the caller holds. A final snapshot written for this ring is used as is.
// Without one by the deadline, the last snapshot of any kind is used and the
// time since it was written is charged at the tenant's peak rate; a final
// snapshot that turns up later (the previous owner saw the change late)
// then replaces that estimate. Without any snapshot the tenant keeps what
// this node already counted.
func (h *handoff) take(gained []string, to *ring.Ring) arrival {
	start := time.Now()
	var a arrival
	pending := make(map[string]*snapshot.Snapshot, len(gained)) // latest seen
	for _, n := range gained {
		pending[n] = nil
	}
	deadline := start.Add(h.wait)
	// A final snapshot for the same member set may be left from an earlier
	// change (a node left and came back); the previous owner writes this
	// change's at most a gossip round before this node sees it.
	recent := start.Add(-2 * time.Second).UnixNano()
	for len(pending) > 0 {
		names := keys(pending)
		snaps, err := h.loadMany(names)
		for i, name := range names {
			if err != nil {
				break
			}
			s := snaps[i]
			if s != nil && s.Final && s.RingHash == to.Hash() && (s.WrittenAt > recent || to == nil) {
				if lim := h.router.Limiter(name); lim != nil {
					lim.Import(time.Now().UnixNano(), s.State)
				}
				h.router.Release(name)
				delete(pending, name)
				a.Final++
				continue
			}
			pending[name] = s
		}
		if len(pending) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(pollEvery)
	}
	stale := make(map[string]limiter.State)
	for name, s := range pending {
		lim := h.router.Limiter(name)
		switch {
		case lim == nil:
		case s == nil:
			a.None++
		default:
			now := time.Now().UnixNano()
			lim.Import(now, s.State)
			lim.ChargeGap(now, s.State)
			stale[name] = lim.Export(now)
			a.Stale++
		}
		h.router.Release(name)
	}
	a.Took = time.Since(start)
	if len(stale) > 0 {
		go h.awaitLateFinals(stale, to)
	}
	return a
}

// awaitLateFinals keeps looking, for a while, for the final snapshots that
// missed the handoff wait; one that arrives replaces the stale state and
// gap estimate the tenant was continued from.
func (h *handoff) awaitLateFinals(base map[string]limiter.State, to *ring.Ring) {
	recent := time.Now().Add(-h.wait - 2*time.Second).UnixNano()
	deadline := time.Now().Add(h.late)
	for len(base) > 0 && time.Now().Before(deadline) {
		select {
		case <-h.stop:
			return
		case <-time.After(4 * pollEvery):
		}
		if h.current() != to {
			return // the ring moved on; a newer handoff is in charge
		}
		names := keys(base)
		snaps, err := h.loadMany(names)
		if err != nil {
			continue
		}
		for i, name := range names {
			s, st := snaps[i], base[name]
			if s == nil || !s.Final || s.RingHash != to.Hash() || s.WrittenAt < recent {
				continue
			}
			if lim := h.router.Limiter(name); lim != nil {
				lim.Replace(time.Now().UnixNano(), st, s.State)
			}
			delete(base, name)
			h.log.Info("handoff", "phase", "late_final", "tenant", name, "from", s.Writer)
		}
	}
}
