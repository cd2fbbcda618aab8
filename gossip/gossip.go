package gossip

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// State is a member's serving state, carried in its gossip metadata.
type State string

const (
	// StateActive: the member serves traffic and owns its share of the ring.
	StateActive State = "active"
	// StateDraining: the member is shutting down; it is still a member but
	// should no longer be given new work.
	StateDraining State = "draining"
)

func (s State) valid() bool { return s == StateActive || s == StateDraining }

// Member is one cluster member as seen by this node.
type Member struct {
	Name       string
	GossipAddr string // host:port memberlist advertises
	HTTPAddr   string // from the member's metadata
	State      State
	// Pins is the hash of the placement the member's config asks for
	// (Config.Pins, SetPins); 0 for none.
	Pins uint64
	// ConfigVersion is the version of the member's config file
	// (Config.ConfigVersion, SetConfigVersion); "" for none.
	ConfigVersion string
	// CannotReach names, by NameHash, the members this one says it cannot
	// reach over HTTP (SetCannotReach).
	CannotReach []uint32
}

func (m Member) equal(o Member) bool {
	return m.Name == o.Name && m.GossipAddr == o.GossipAddr && m.HTTPAddr == o.HTTPAddr && m.State == o.State &&
		m.Pins == o.Pins && m.ConfigVersion == o.ConfigVersion && slices.Equal(m.CannotReach, o.CannotReach)
}

// Config configures a Node. Only Name is required.
type Config struct {
	// Name must be unique in the cluster (memberlist would default to the
	// host name, which collides when several nodes share a host).
	Name string
	// BindAddr is the IP:port for gossip over TCP and UDP; port 0 picks a
	// free port (see Node.GossipAddr). Default "0.0.0.0:7946".
	BindAddr string
	// AdvertiseAddr is the IP:port other members should use, if it differs
	// from the bound address (NAT, 0.0.0.0). Port 0 = the bound port.
	AdvertiseAddr string
	// HTTPAddr is carried in the node metadata for the other members.
	HTTPAddr string
	// Pins is carried in the node metadata too: the hash of the placement
	// this node's config asks for, so that members can tell when they all
	// ask for the same (SetPins changes it).
	Pins uint64
	// ConfigVersion is carried in the node metadata too: the version of
	// the config file this node runs, so that members can show which
	// config each runs (SetConfigVersion changes it).
	ConfigVersion string
	// Seeds are gossip addresses (host:port) to join. Empty: start a new
	// cluster. This node's own address is skipped if listed.
	Seeds []string
	// SecretKey (16, 24 or 32 bytes) encrypts and authenticates all gossip
	// with AES-GCM; every member must use the same key. nil = plaintext
	// (a warning is logged).
	SecretKey []byte
	// Timing: zero fields take LANFast's values.
	Timing Timing
	// Transport replaces memberlist's UDP+TCP transport (tests: fault
	// injection). BindAddr is then ignored.
	Transport memberlist.NodeAwareTransport
	// Logger receives JSON-friendly records: message "gossip" with an
	// "event" attribute, and message "memberlist" for the library's own
	// lines. nil = slog.Default().
	Logger *slog.Logger
	// OnChange is called after every membership or metadata change with the
	// full live member list (as Members returns it). Calls come from one
	// goroutine, never concurrently, coalesced, and an unchanged list is not
	// delivered twice. It may block without stalling gossip (later changes
	// are then coalesced) and may call any Node method, Leave included. The
	// first call comes once the node has joined: right after Start for a new
	// cluster (the list holds at least the node itself), after a seed
	// answered otherwise, never with a view of the node alone while its
	// seeds are silent. No call starts after Leave/Shutdown has returned, apart from
	// one that was already past its last check.
	OnChange func(members []Member)
}

// ErrStopped is returned by SetState after Leave or Shutdown.
var ErrStopped = errors.New("gossip: node has left or shut down")

const (
	defaultBindAddr = "0.0.0.0:7946"
	joinBackoffMin  = 50 * time.Millisecond
	joinBackoffMax  = 2 * time.Second
	maxFastRejoins  = 25
	warnEvery       = 30 * time.Second
)

// Node is this process's membership in the cluster.
type Node struct {
	name          string
	httpAddr      string
	pins          atomic.Uint64            // what the metadata carries as Pins
	configVersion atomic.Pointer[string]   // what the metadata carries as ConfigVersion
	cannotReach   atomic.Pointer[[]uint32] // what the metadata carries as CannotReach
	gossipAddr    string
	timing        Timing
	log           *slog.Logger
	onChange      func([]Member)
	ml            *memberlist.Memberlist
	d             *delegate

	setMu sync.Mutex // serialises SetState (meta read by UpdateNode must be the latest)

	// life is held shared around every call into memberlist that must not
	// run after Leave/Shutdown (Join, UpdateNode) and exclusively by
	// Leave/Shutdown, so that a rejoin can never push our "alive" state to
	// the cluster after a simulated crash and Leave never meets a shut-down
	// memberlist (which panics).
	life    sync.RWMutex
	stopped atomic.Bool // written under life (exclusive)
	done    chan struct{}

	joined       atomic.Bool
	joinAttempts atomic.Int64 // join calls made (tests)
	// joinMu serialises joins: each reads what its seed said of us from
	// the one delegate.mergeView (the rejoin loop and Resync both join).
	joinMu sync.Mutex
}

// Start creates the memberlist and returns at once. With Seeds, it joins in
// the background (exponential backoff 50 ms to 2 s until a seed answers) and
// then keeps re-joining the seeds every Timing.RejoinInterval.
func Start(cfg Config) (*Node, error) {
	if cfg.Name == "" {
		return nil, errors.New("gossip: Config.Name is required")
	}
	timing := cfg.Timing.withDefaults()
	if err := timing.validate(); err != nil {
		return nil, err
	}
	switch len(cfg.SecretKey) {
	case 0, 16, 24, 32:
	default:
		return nil, fmt.Errorf("gossip: SecretKey must be 16, 24 or 32 bytes, got %d", len(cfg.SecretKey))
	}
	meta, err := encodeMeta(wireMeta{H: cfg.HTTPAddr, S: StateActive, P: cfg.Pins, C: cfg.ConfigVersion})
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("node", cfg.Name)

	mlc := memberlist.DefaultLANConfig()
	mlc.Name = cfg.Name
	timing.apply(mlc)
	bindAddr := cfg.BindAddr
	if bindAddr == "" {
		bindAddr = defaultBindAddr
	}
	host, port, err := splitIPPort(bindAddr)
	if err != nil {
		return nil, fmt.Errorf("gossip: BindAddr: %w", err)
	}
	mlc.BindAddr, mlc.BindPort = host, port
	mlc.AdvertiseAddr, mlc.AdvertisePort = "", port
	if cfg.AdvertiseAddr != "" {
		ah, ap, err := splitIPPort(cfg.AdvertiseAddr)
		if err != nil {
			return nil, fmt.Errorf("gossip: AdvertiseAddr: %w", err)
		}
		if ap == 0 {
			if cfg.Transport != nil {
				return nil, errors.New("gossip: AdvertiseAddr needs an explicit port with a custom Transport")
			}
			ap = port // 0 too: memberlist then advertises the port it bound
		}
		mlc.AdvertiseAddr, mlc.AdvertisePort = ah, ap
	}
	if cfg.Transport != nil {
		mlc.Transport = cfg.Transport
	}
	if len(cfg.SecretKey) > 0 {
		mlc.SecretKey = bytes.Clone(cfg.SecretKey)
	}
	d := newDelegate(cfg.Name, meta, StateActive)
	mlc.Delegate = d
	mlc.Events = d
	mlc.Merge = d
	mlc.LogOutput = nil
	mlc.Logger = log.New(mlLogWriter{logger}, "", 0)

	ml, err := memberlist.Create(mlc)
	if err != nil {
		return nil, fmt.Errorf("gossip: start memberlist: %w", err)
	}
	n := &Node{
		name:       cfg.Name,
		httpAddr:   cfg.HTTPAddr,
		gossipAddr: d.selfAddr(), // recorded from our own join event inside Create
		timing:     timing,
		log:        logger,
		onChange:   cfg.OnChange,
		ml:         ml,
		d:          d,
		done:       make(chan struct{}),
	}
	n.pins.Store(cfg.Pins)
	n.configVersion.Store(&cfg.ConfigVersion)
	if len(cfg.SecretKey) == 0 {
		logger.Warn("gossip", "event", "plaintext", "detail", "no SecretKey: gossip is neither encrypted nor authenticated")
	}
	seeds := n.otherSeeds(cfg.Seeds, bindAddr, cfg.AdvertiseAddr)
	logger.Info("gossip", "event", "start", "member", n.name, "gossip_addr", n.gossipAddr,
		"http_addr", n.httpAddr, "encrypted", len(cfg.SecretKey) > 0, "seeds", seeds)

	go n.notifyLoop()
	if len(seeds) == 0 {
		n.joined.Store(true) // a new cluster of one
		n.d.notify()         // the first view, held back until now (notifyLoop)
	} else {
		go n.joinLoop(seeds)
	}
	return n, nil
}

// splitIPPort parses "ip:port"; memberlist needs an IP literal, not a name.
func splitIPPort(hp string) (string, int, error) {
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	if h == "" {
		h = "0.0.0.0"
	}
	if net.ParseIP(h) == nil {
		return "", 0, fmt.Errorf("host %q is not an IP address", h)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return h, port, nil
}

// otherSeeds drops empty entries, duplicates and this node's own address.
func (n *Node) otherSeeds(seeds []string, bindAddr, advertiseAddr string) []string {
	own := map[string]bool{n.gossipAddr: true}
	for _, a := range []string{bindAddr, advertiseAddr} {
		if h, p, err := net.SplitHostPort(a); err == nil && p != "0" {
			if ip := net.ParseIP(h); ip != nil && !ip.IsUnspecified() {
				own[a] = true
			}
		}
	}
	var out []string
	for _, s := range seeds {
		s = strings.TrimSpace(s)
		if s == "" || own[s] || slices.Contains(out, s) {
			continue
		}
		out = append(out, s)
	}
	return out
}

// Self returns this node as other members see it.
func (n *Node) Self() Member {
	_, st := n.d.currentMeta()
	return Member{Name: n.name, GossipAddr: n.gossipAddr, HTTPAddr: n.httpAddr, State: st, Pins: n.pins.Load(),
		ConfigVersion: *n.configVersion.Load(), CannotReach: n.cannotReachNow()}
}

// Members returns the live members, self included, sorted by name; nil after
// Leave or Shutdown.
//
// Live means memberlist's StateAlive and StateSuspect. Suspect members stay
// on purpose: suspicion is only a hypothesis the member can refute within
// the suspicion timeout (a GC pause or a few lost UDP packets cause it), and
// dropping it at once would reshuffle the consumers' hash ring, moving
// tenants' counters and back again, on every hiccup. A member that really
// crashed is removed when the suspicion times out (1.6-3.2 s with LANFast).
//
// Members whose metadata cannot be decoded (another version, garbage) are
// left out: without an HTTP address and state they cannot be used.
func (n *Node) Members() []Member {
	if n.stopped.Load() {
		return nil
	}
	n.d.viewMu.RLock()
	out := make([]Member, 0, len(n.d.view)+1)
	for name, e := range n.d.view {
		if name != n.name && e.valid {
			out = append(out, e.m)
		}
	}
	n.d.viewMu.RUnlock()
	out = append(out, n.Self())
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Peers returns Members without this node (matched by name).
func (n *Node) Peers() []Member {
	return slices.DeleteFunc(n.Members(), func(m Member) bool { return m.Name == n.name })
}

// GossipAddr is the address memberlist advertises, with the bound port
// resolved when BindAddr asked for port 0.
func (n *Node) GossipAddr() string { return n.gossipAddr }

// Joined reports whether the node started a new cluster (no other seeds) or
// a join with a seed has succeeded.
func (n *Node) Joined() bool { return n.joined.Load() }

// SetState changes this node's state and broadcasts it; peers see it through
// OnChange/Members. Setting the current state again is a no-op. It waits up to max(1 s, 10 GossipInterval) for the
// broadcast to go out: on timeout the state is still set locally and will
// reach peers through gossip and push/pull, and the error says so.
func (n *Node) SetState(s State) error {
	if !s.valid() {
		return fmt.Errorf("gossip: invalid state %q", s)
	}
	var old State
	err := n.updateMeta(func(m *wireMeta) bool {
		old, m.S = m.S, s
		return old != s
	})
	if errors.Is(err, ErrStopped) {
		return err
	}
	if err != nil {
		n.log.Warn("gossip", "event", "state", "member", n.name, "from", old, "to", s, "error", err)
		return fmt.Errorf("gossip: state %q: %w", s, err)
	}
	if old != s {
		n.log.Info("gossip", "event", "state", "member", n.name, "from", old, "to", s)
	}
	return nil
}

// SetPins changes the placement hash this node's metadata carries and
// broadcasts it, like SetState; the same value again is a no-op.
func (n *Node) SetPins(p uint64) error {
	return n.setMeta("pins", func(m *wireMeta) bool {
		old := m.P
		m.P = p
		return old != p
	})
}

// SetConfigVersion changes the config version this node's metadata
// carries and broadcasts it, like SetPins.
func (n *Node) SetConfigVersion(v string) error {
	return n.setMeta("config_version", func(m *wireMeta) bool {
		old := m.C
		m.C = v
		return old != v
	})
}

// SetCannotReach sets the members this node's metadata says it cannot
// reach over HTTP (the owners it admits fallback shares for), at most
// MaxCannotReach of them, and broadcasts it like SetPins.
func (n *Node) SetCannotReach(names []string) error {
	hs := make([]uint32, 0, min(len(names), MaxCannotReach))
	for _, name := range names {
		if len(hs) == MaxCannotReach {
			break
		}
		hs = append(hs, NameHash(name))
	}
	slices.Sort(hs)
	return n.setMeta("cannot_reach", func(m *wireMeta) bool {
		old := m.U
		m.U = hs
		return !slices.Equal(old, hs)
	})
}

func (n *Node) cannotReachNow() []uint32 {
	if p := n.cannotReach.Load(); p != nil {
		return *p
	}
	return nil
}

// setMeta is updateMeta for one field, named event in the warning logged
// when the broadcast is not confirmed.
func (n *Node) setMeta(event string, change func(*wireMeta) bool) error {
	err := n.updateMeta(change)
	if errors.Is(err, ErrStopped) {
		return err
	}
	if err != nil {
		n.log.Warn("gossip", "event", event, "member", n.name, "error", err)
		return fmt.Errorf("gossip: %s: %w", event, err)
	}
	return nil
}

// updateMeta changes this node's metadata as change says (nothing if it
// reports no change) and broadcasts it. An error after the change was made
// locally says the broadcast was not confirmed; gossip and push/pull still
// carry it to the peers.
func (n *Node) updateMeta(change func(*wireMeta) bool) error {
	n.setMu.Lock()
	defer n.setMu.Unlock()
	n.life.RLock()
	defer n.life.RUnlock()
	if n.stopped.Load() {
		return ErrStopped
	}
	_, st := n.d.currentMeta()
	m := wireMeta{H: n.httpAddr, S: st, P: n.pins.Load(), C: *n.configVersion.Load(), U: n.cannotReachNow()}
	if !change(&m) {
		return nil
	}
	meta, err := encodeMeta(m)
	if err != nil {
		return err
	}
	n.pins.Store(m.P)
	n.configVersion.Store(&m.C)
	n.cannotReach.Store(&m.U)
	n.d.setMeta(meta, m.S)
	// UpdateNode re-reads NodeMeta, bumps our incarnation, updates our own
	// entry (which fires our update event) and broadcasts.
	if err := n.ml.UpdateNode(n.timing.updateTimeout()); err != nil {
		return fmt.Errorf("set locally, broadcast not confirmed: %w", err)
	}
	return nil
}

// Leave announces a graceful departure, waits up to timeout (<= 0: 1 s) for
// the announcement to go out, then shuts down (memberlist's Leave alone keeps
// the listeners running). Peers drop the member at once instead of after the
// suspicion timeout. Idempotent and safe after Shutdown. A Node cannot rejoin
// after Leave: Start a new one (same name is fine).
func (n *Node) Leave(timeout time.Duration) error {
	if timeout <= 0 {
		timeout = time.Second // memberlist would wait forever
	}
	n.life.Lock()
	defer n.life.Unlock()
	if n.stopped.Load() {
		return nil
	}
	n.stop()
	start := time.Now()
	lerr := n.ml.Leave(timeout)
	serr := n.ml.Shutdown()
	if err := errors.Join(lerr, serr); err != nil {
		n.log.Warn("gossip", "event", "left", "member", n.name, "took", time.Since(start), "error", err)
	} else {
		n.log.Info("gossip", "event", "left", "member", n.name, "took", time.Since(start))
	}
	if lerr != nil {
		lerr = fmt.Errorf("gossip: leave: %w", lerr)
	}
	return errors.Join(lerr, serr)
}

// Shutdown stops the node without announcing it: peers detect it as failed,
// exactly like a crash. Idempotent; Leave afterwards is a no-op.
func (n *Node) Shutdown() error {
	n.life.Lock()
	defer n.life.Unlock()
	if n.stopped.Load() {
		return nil
	}
	n.stop()
	if err := n.ml.Shutdown(); err != nil {
		n.log.Warn("gossip", "event", "shutdown", "member", n.name, "error", err)
		return err
	}
	n.log.Info("gossip", "event", "shutdown", "member", n.name)
	return nil
}

// stop must be called with life held exclusively.
func (n *Node) stop() {
	n.stopped.Store(true)
	close(n.done)
}

// sleep waits d, returning false if the node stopped meanwhile.
func (n *Node) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-n.done:
		return false
	case <-t.C:
		return true
	}
}

// jitter spreads d by ±10% so that nodes restarted together do not join in
// lockstep.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d - d/10 + rand.N(d/5+1)
}

// joinLoop joins the seeds with exponential backoff until one answers, then
// re-joins them periodically. A re-join is a full state exchange with each
// seed: it re-introduces members that the cluster declared dead and reaped
// (after a partition, memberlist never probes them again), and it is how a
// member restarted under the same name gets its new incarnation accepted.
// While a seed's view of us is stale (it does not list us alive at this
// address with this metadata yet), re-joins run every ProbeInterval instead of
// RejoinInterval, for up to maxFastRejoins rounds.
func (n *Node) joinLoop(seeds []string) {
	backoff := joinBackoffMin
	fast := 0
	var lastWarn time.Time
	for {
		contacted, confirmed, errs := n.joinOnce(seeds)
		if n.stopped.Load() {
			return
		}
		if contacted > 0 && !n.joined.Swap(true) {
			n.log.Info("gossip", "event", "joined", "member", n.name, "seeds_contacted", contacted, "attempts", n.joinAttempts.Load())
			n.d.notify() // deliver the first view, held back until now
		}
		if contacted == 0 {
			lvl := slog.LevelDebug
			if time.Since(lastWarn) > warnEvery {
				lvl, lastWarn = slog.LevelWarn, time.Now()
			}
			n.log.Log(context.Background(), lvl, "gossip", "event", "join_failed", "member", n.name, "seeds", seeds, "joined", n.joined.Load(), "error", errs)
		}

		var wait time.Duration
		switch {
		case !n.joined.Load():
			wait = backoff
			backoff = min(2*backoff, joinBackoffMax)
		case confirmed:
			fast = 0
			wait = n.timing.RejoinInterval
		case contacted > 0 && fast < maxFastRejoins:
			fast++
			wait = n.timing.fastRejoin()
		default:
			if contacted > 0 && fast == maxFastRejoins {
				fast++ // warn once per streak
				n.log.Warn("gossip", "event", "stale_view", "member", n.name,
					"detail", "seeds still list another address or state for this name; is another live member using it?")
			}
			wait = n.timing.RejoinInterval
		}
		if !n.sleep(jitter(wait)) {
			return
		}
	}
}

// joinOnce joins each seed in turn. confirmed is true if at least one seed
// answered and every seed that answered already listed us fresh.
func (n *Node) joinOnce(seeds []string) (contacted int, confirmed bool, errs error) {
	confirmed = true
	for _, s := range seeds {
		n.joinMu.Lock()
		n.life.RLock()
		if n.stopped.Load() {
			n.life.RUnlock()
			n.joinMu.Unlock()
			return contacted, false, ErrStopped
		}
		n.d.mergeView.Store(viewNone)
		c, err := n.ml.Join([]string{s})
		view := n.d.mergeView.Load()
		n.life.RUnlock()
		n.joinMu.Unlock()
		n.joinAttempts.Add(1)
		if c > 0 {
			contacted += c
			if view != viewFresh {
				confirmed = false
			}
		} else {
			errs = errors.Join(errs, err)
		}
	}
	return contacted, confirmed && contacted > 0, errs
}

// Resync exchanges full state (a join's push/pull) with every other live
// member and reports whether each one that answered lists this node alive,
// at its address, with its current metadata. A node that was stopped for
// longer than failure detection calls it until it is confirmed: a member
// that declared it dead or suspect meanwhile says so in the exchange, which
// makes memberlist refute (a higher incarnation, broadcast alive), and a
// later round confirms that the refutation took. Alone (no other member),
// it is confirmed at once.
func (n *Node) Resync() (contacted int, confirmed bool, err error) {
	var addrs []string
	for _, m := range n.Peers() {
		addrs = append(addrs, m.GossipAddr)
	}
	if len(addrs) == 0 {
		return 0, !n.stopped.Load(), nil
	}
	return n.joinOnce(addrs)
}

// notifyLoop logs membership events and delivers OnChange, from this one
// goroutine, outside memberlist's locks.
func (n *Node) notifyLoop() {
	var last []Member
	delivered := false
	for {
		select {
		case <-n.done:
			return
		case <-n.d.signal:
		}
		events, dropped := n.d.takeEvents()
		for _, e := range events {
			n.logEvent(e)
		}
		if dropped > 0 {
			n.log.Warn("gossip", "event", "events_dropped", "count", dropped)
		}
		if n.onChange == nil || !n.joined.Load() {
			// Before it has joined, a node's view is itself alone: a
			// consumer building a ring of it would own every tenant.
			continue
		}
		members := n.Members()
		if delivered && slices.EqualFunc(members, last, Member.equal) {
			continue
		}
		select {
		case <-n.done:
			return
		default:
		}
		last, delivered = members, true
		n.onChange(slices.Clone(members))
	}
}

func (n *Node) logEvent(e memberEvent) {
	args := []any{"event", e.kind, "member", e.m.Name, "gossip_addr", e.m.GossipAddr}
	if e.isMe {
		args = append(args, "self", true)
	}
	if e.err != nil {
		n.log.Warn("gossip", append(args, "meta_bytes", e.metaN, "error", e.err, "detail", "member skipped: undecodable metadata")...)
		return
	}
	n.log.Info("gossip", append(args, "http_addr", e.m.HTTPAddr, "state", e.m.State)...)
}
