// Package node wires one ringgate process together: configuration, the
// router, the HTTP server, gossip and the ring; it owns start-up order, the
// rebalance log and the drain on shutdown. It holds no policy of its own:
// limits live in limiter and reserve, routing in router, membership in gossip,
// ownership in ring.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/gossip"
	"github.com/ringgate/ringgate/handoff"
	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/redisconn"
	"github.com/ringgate/ringgate/reserve"
	"github.com/ringgate/ringgate/ring"
	"github.com/ringgate/ringgate/router"
	"github.com/ringgate/ringgate/snapshot"
)

// Options are what Start needs beyond the configuration.
type Options struct {
	Logger    *slog.Logger
	Tokenizer *reserve.Tokenizer // shared by nodes in one process; nil loads one
	Clock     clockwork.Clock    // the node's one clock; nil is the wall clock
	// Listener, if set, is used instead of listening on cfg.Node.Listen.
	Listener net.Listener
	// Timing overrides gossip timings (zero: gossip.LANFast).
	Timing gossip.Timing
	// RingDebounce coalesces bursts of membership events (0: ring default).
	RingDebounce time.Duration
	// DrainGrace is how long a draining node keeps answering after /readyz
	// turned 503, so load balancers notice (default 1s, capped by the drain
	// timeout).
	DrainGrace time.Duration
	// OnAdmit, if set, is told of every admission the node decides
	// (router.Options.OnAdmit).
	OnAdmit func(tenant string, at int64, requestID []byte)
	// Source reads the config again, as the node was started from it
	// (main: the file and the flags): SIGHUP and POST /admin/reload apply
	// what it returns (ReloadFromSource). nil: POST /admin/reload answers
	// 409.
	Source func() (*config.Config, error)
}

// Node is a running ringgate node.
type Node struct {
	cfg    *config.Config
	log    *slog.Logger
	router *router.Router
	server *fasthttp.Server
	ln     net.Listener
	served chan error
	grace  time.Duration
	conns  openConns

	gossip *gossip.Node // nil: standalone (node.gossip = "")
	table  *ring.Table

	mover  *handoff.Mover  // moves tenants' state on ring changes
	store  *snapshot.Store // nil without Redis
	conn   *redisconn.Conn // nil without Redis
	leases leaseWork

	pubMu       sync.Mutex
	mu          sync.Mutex
	metrics     *nodeMetrics
	reload      reloading
	ring        *ring.Ring // the ring onRing last handled: the one routing uses
	members     []gossip.Member
	changedAt   time.Time
	stopOnce    sync.Once
	tenantNames []string

	wake waker // pause watchdog and catch-up (wake.go)

	pins pinsAgreement // where teams place their tenants (pins.go)
}

// openConns are the server's open connections, which Close cuts as a crash
// would (a server's Shutdown answers on them until they idle).
type openConns struct {
	mu  sync.Mutex
	set map[net.Conn]struct{}
}

// leaseWork keeps this node's part of the providers' limits: the leaser,
// and stop, which ends the leaser's and the router's spillover goroutines.
type leaseWork struct {
	leaser *lease.Leaser
	stop   context.CancelFunc
}

// reloading is what ReloadFromSource reads the config again with: source
// (Options.Source), and mu, which keeps two reloads from it (a SIGHUP and a
// POST) from interleaving.
type reloading struct {
	mu     sync.Mutex
	source func() (*config.Config, error)
}

// Start builds and starts a node; it serves until Drain or Close. With
// node.gossip empty the node runs standalone and enforces every tenant.
func Start(cfg *config.Config, o Options) (*Node, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	log := o.Logger.With("node", cfg.Node.Name)
	logWarnings(log, cfg.Warnings(), nil)
	var metrics atomic.Pointer[nodeMetrics] // made with the router, which holds the registry
	conn, leases, err := dialRedis(cfg, log, &metrics)
	if err != nil {
		return nil, err
	}
	n, err := newNode(cfg, o, log, conn, leases)
	if err != nil {
		if conn != nil {
			_ = conn.Close()
		}
		return nil, err
	}
	metrics.Store(n.metrics)
	n.startLeases()
	if len(n.tenantNames) >= bigConfig {
		// Parsing and building a big config leaves a heap's worth of
		// garbage (the TOML document as maps): give it back to the
		// system now, not whenever the scavenger gets to it (~90 MiB of
		// resident memory with 100 000 tenants).
		debug.FreeOSMemory()
	}
	store, err := n.openSnapshots()
	if err != nil {
		_ = n.ln.Close()
		n.closeLeases(false)
		return nil, err
	}
	n.startHandoff(o, store)
	go func() { n.served <- n.server.Serve(n.ln) }()

	if cfg.Node.Gossip != "" {
		if err := n.join(o); err != nil {
			_ = n.ln.Close()
			n.closeLeases(false)
			n.shutdown()
			return nil, err
		}
	}
	if o.Source != nil {
		n.reload.source = o.Source
		n.router.SetReloader(n.ReloadFromSource)
	}
	log.Info("start", "listen", n.ln.Addr().String(), "gossip", n.GossipAddr(), "tenants", len(cfg.Tenants), "upstreams", len(cfg.Upstreams),
		"config_version", n.router.ConfigVersion())
	return n, nil
}

// dialRedis opens the one Redis connection (one budget per call, one
// breaker) that the snapshots and the leases share, and the lease store on
// it; both are nil without Redis. metrics counts the calls once the router,
// which holds the registry, has made it.
func dialRedis(cfg *config.Config, log *slog.Logger, metrics *atomic.Pointer[nodeMetrics]) (*redisconn.Conn, lease.Store, error) {
	if !cfg.Redis.Enabled() {
		return nil, nil, nil
	}
	rc := redisConfig(cfg.Redis, log)
	rc.OnCall = func(took time.Duration, err error) {
		if m := metrics.Load(); m != nil { // the script load at start comes first
			m.redisCall(took, err)
		}
	}
	conn, err := redisconn.New(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("start node %s: redis: %w", cfg.Node.Name, err)
	}
	rs := lease.NewRedisStore(conn, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	// The first call dials, TLS and all: it gets more than redis.timeout.
	ping := func(ctx context.Context) error { return conn.Client().Ping(ctx).Err() }
	if err := conn.Call(ctx, 500*time.Millisecond, ping); err != nil {
		// Not fatal: Redis may come later; the node serves meanwhile, and
		// says how.
		log.Warn("redis", "phase", "unreachable", "addrs", cfg.Redis.Addresses(), "error", err.Error(),
			"detail", "Redis cannot be reached at start: until it answers, each upstream's limits follow its on_redis_down "+
				"(by default this node keeps to its strict share of them), and no tenant state is saved to it or restored from it")
	} else if err := rs.Load(ctx); err != nil {
		// Not fatal: Redis may come later, and a script unknown to
		// it is sent whole (EVAL) on first use.
		log.Warn("lease", "phase", "load_scripts", "error", err.Error())
	}
	return conn, rs, nil
}

// startOnly are the tables read at start only: a reload leaves their
// warnings as the start logged them.
var startOnly = []string{"node", "cluster", "redis"}

// logWarnings logs one "config" line per setting that cannot take effect,
// but those of the tables in skip.
func logWarnings(log *slog.Logger, ws []config.Warning, skip []string) {
	for _, w := range ws {
		table, _, _ := strings.Cut(w.Key, ".")
		if slices.Contains(skip, table) {
			continue
		}
		log.Warn("config", "key", w.Key, "file", w.File, "line", w.Line, "detail", w.Msg)
	}
}

// unixNano reads o's clock in Unix nanoseconds, for the packages that only
// read it.
func (o Options) unixNano() func() int64 {
	if o.Clock == nil {
		return func() int64 { return time.Now().UnixNano() }
	}
	return func() int64 { return o.Clock.Now().UnixNano() }
}

// newNode makes the node's leaser, router and listener: all it serves with,
// nothing started yet.
func newNode(cfg *config.Config, o Options, log *slog.Logger, conn *redisconn.Conn, leases lease.Store) (*Node, error) {
	leaser := lease.NewLeaser(lease.LeaserConfig{Store: leases, Node: cfg.Node.Name, Clock: o.unixNano(), Logger: log})
	rt, err := router.New(router.Options{Config: cfg, Tokenizer: o.Tokenizer, Clock: o.Clock, Logger: log, Leaser: leaser, OnAdmit: o.OnAdmit})
	if err != nil {
		return nil, fmt.Errorf("start node %s: %w", cfg.Node.Name, err)
	}
	ln := o.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Node.Listen); err != nil {
			return nil, fmt.Errorf("start node %s: listen %s: %w", cfg.Node.Name, cfg.Node.Listen, err)
		}
	}
	n := &Node{cfg: cfg, log: log, router: rt, server: rt.Server(), ln: ln, served: make(chan error, 1), grace: o.DrainGrace,
		conn: conn, leases: leaseWork{leaser: leaser}, metrics: newNodeMetrics(rt.Register)}
	n.conns.set = make(map[net.Conn]struct{})
	n.server.ConnState = n.conns.track
	if n.grace <= 0 {
		n.grace = time.Second
	}
	n.tenantNames = rt.Moves().Names()
	return n, nil
}

// startLeases runs the leaser and the router's spillover until closeLeases.
func (n *Node) startLeases() {
	ctx, stop := context.WithCancel(context.Background())
	n.leases.stop = stop
	go n.leases.leaser.Run(ctx)
	go n.router.RunSpillover(ctx)
}

// openSnapshots opens the snapshot store on the Redis connection and
// exposes its counters; without Redis the handoff protocol has no store.
func (n *Node) openSnapshots() (handoff.Store, error) {
	if !n.cfg.Redis.Enabled() {
		return handoff.NoStore{}, nil
	}
	s, err := snapshot.NewStore(snapshot.StoreConfig{Conn: n.conn, Logger: n.log})
	if err != nil {
		return nil, fmt.Errorf("start node %s: redis: %w", n.cfg.Node.Name, err)
	}
	n.store = s
	for _, c := range storeCollectors(s) {
		_ = n.router.Register(c)
	}
	return s, nil
}

// startHandoff starts the handoff protocol, on which the router hands
// tenants over and takes them back.
func (n *Node) startHandoff(o Options, store handoff.Store) {
	moves := n.router.Moves()
	n.mover = handoff.New(moverConfig(n.cfg, o.unixNano(), o), moves, moves, store, n.currentRing)
	moves.SetHandOver(n.mover.HandOver)
	moves.SetTakeBack(n.mover.TakeBack)
	if n.store != nil {
		n.router.SetFallbackSeed(n.mover.LastState)
	}
	n.mover.Start()
	if n.store != nil && n.cfg.Node.Gossip == "" {
		n.restore()
	}
}

// restore makes a standalone node that restarts continue its tenants'
// windows from the last snapshots instead of starting them empty; it runs
// before the node serves.
func (n *Node) restore() {
	a := n.mover.Restore(n.tenants())
	n.metrics.handedOff(a, a.Took)
	n.log.Info("rebalance", "ring_version", 0, "members", []string{n.cfg.Node.Name}, "taken_over", len(n.tenants()),
		"state", a.Counts(), "handoff_ms", a.Took.Milliseconds())
	n.router.NoteRebalance(router.Rebalance{Members: []string{n.cfg.Node.Name}, TakenOver: len(n.tenants()),
		State: a.Counts(), HandoffMs: a.Took.Milliseconds()})
}

// join makes the node a cluster member: unready until it has joined and
// holds a ring, it builds its rings from what gossip says of the members
// and watches for pauses.
func (n *Node) join(o Options) error {
	cfg := n.cfg
	n.router.SetReady(false)
	n.table = ring.NewTable(cfg.Node.Name, o.RingDebounce, n.onRing)
	// Until the members are known, the placement its config asks for
	// (agreePins).
	n.pins.setWant(n.router.Moves().Pins())
	n.pins.use, n.pins.useHash = n.pins.want, n.pins.wantHash
	n.table.SetPins(n.pins.use)
	g, err := gossip.Start(gossip.Config{
		Name:          cfg.Node.Name,
		BindAddr:      cfg.Node.Gossip,
		AdvertiseAddr: cfg.Node.Advertise,
		HTTPAddr:      advertisedHTTP(n.ln.Addr().String(), cfg.Node.Advertise, cfg.Node.Gossip),
		Seeds:         cfg.Node.Join,
		SecretKey:     cfg.Cluster.Secret,
		Timing:        o.Timing,
		Logger:        o.Logger, // gossip adds the node name itself
		OnChange:      n.onMembers,
		Pins:          n.pins.wantHash,
		ConfigVersion: n.router.ConfigVersion(),
	})
	if err != nil {
		n.table.Close()
		return fmt.Errorf("start node %s: gossip: %w", cfg.Node.Name, err)
	}
	n.mu.Lock()
	n.gossip = g
	n.mu.Unlock()
	// The owners this node falls back on are named in its metadata:
	// each keeps its own admissions to its part (router/internal/away).
	n.router.SetCannotReachHook(func(owners []string) { _ = g.SetCannotReach(owners) })
	n.startWatchdog(o.Timing)
	return nil
}

// advertisedHTTP is the HTTP address peers should use: the listener's, with
// an unspecified host (0.0.0.0, ::) replaced by the advertised or gossip host.
func advertisedHTTP(listen, advertise, gossipBind string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		return listen
	}
	for _, a := range []string{advertise, gossipBind} {
		if h, _, err := net.SplitHostPort(a); err == nil {
			if ip := net.ParseIP(h); h != "" && (ip == nil || !ip.IsUnspecified()) {
				return net.JoinHostPort(h, port)
			}
		}
	}
	return listen
}

// onMembers runs on every membership change (from gossip's one goroutine);
// gossip delivers none before the node has joined, so a node whose seeds
// are slow never builds a ring of itself and takes every tenant.
func (n *Node) onMembers(ms []gossip.Member) {
	n.mu.Lock()
	n.members = ms
	n.changedAt = time.Now()
	n.mu.Unlock()
	n.agreePins(ms)
	n.wake.mu.Lock()
	n.table.Update(n.activeLocked(ms)) // the active members (without self while catching up: wake.go)
	n.wake.mu.Unlock()
	n.publish()
}

// onRing runs after each new ring is built (from the table's goroutine):
// the handoff protocol holds the tenants this node gains, the router
// switches to the new ring, the tenants it lost are handed over and the
// ones it gained taken over with their state; then the rebalance is logged.
func (n *Node) onRing(from, to *ring.Ring) {
	start := time.Now()
	moved := ring.Moved(from, to, n.tenants())
	lost, gained, a := n.mover.Change(from, to, func() {
		n.mu.Lock()
		n.ring = to
		n.mu.Unlock()
		n.publish()
	})
	n.router.KickQueues(lost) // frozen now: their waiting requests go to the new owners
	n.mu.Lock()
	since := time.Since(n.changedAt)
	n.mu.Unlock()
	n.metrics.handedOff(a, time.Since(start))
	n.log.Info("rebalance",
		"ring_version", to.Version(),
		"members", append([]string{}, to.Members()...), // [] rather than null when empty
		"moved", len(moved),
		"moved_tenants", boundedList(moved, maxLoggedTenants),
		"partitions_moved", ring.MovedPartitions(from, to),
		"handed_over", len(lost),
		"taken_over", len(gained),
		// How the state of the tenants this node took over arrived.
		"state", a.Counts(),
		"handoff_ms", time.Since(start).Milliseconds(),
		"took_ms", since.Milliseconds(),
	)
	n.router.NoteRebalance(router.Rebalance{RingVersion: to.Version(), Members: append([]string{}, to.Members()...),
		Moved: len(moved), HandedOver: len(lost), TakenOver: len(gained), State: a.Counts(),
		HandoffMs: time.Since(start).Milliseconds()})
	if len(lost)+len(gained) >= bigConfig {
		// The state of tens of thousands of tenants went through this
		// node as messages: give their garbage back to the system now
		// (the second node of a 100 000-tenant cluster held 216-246 MiB
		// resident for a while after taking half of them, 128-184 MiB
		// the others).
		go debug.FreeOSMemory()
	}
}

// bigConfig is the number of tenants from which start-up, and a handoff,
// return the garbage of building or moving them to the system at once.
const bigConfig = 10_000

// maxLoggedTenants bounds the tenant names one log line lists.
const maxLoggedTenants = 50

// boundedList is names, cut to at most n with a last entry saying how many
// more there were.
func boundedList(names []string, n int) []string {
	if len(names) <= n {
		return names
	}
	return append(append([]string{}, names[:n]...), fmt.Sprintf("… %d more", len(names)-n))
}

// currentRing is the ring routing uses (nil standalone or before the first).
func (n *Node) currentRing() *ring.Ring {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ring
}

// tenants are the configured tenant names.
func (n *Node) tenants() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.tenantNames
}

// publish gives the router the ring onRing last handled and the current
// members, and turns the node ready once it has joined and holds a ring.
// Gossip's and the ring table's goroutines both call it: pubMu keeps an
// older view from being published after a newer one.
func (n *Node) publish() {
	n.pubMu.Lock()
	defer n.pubMu.Unlock()
	n.mu.Lock()
	ms, g, r := n.members, n.gossip, n.ring
	n.mu.Unlock()
	if r.Len() > 0 && (len(n.cfg.Node.Join) == 0 || g != nil && g.Joined()) && !n.catchingUp() {
		n.router.SetReady(true)
	}
	view := router.View{Ring: r}
	self := gossip.NameHash(n.cfg.Node.Name)
	for _, m := range ms {
		view.Members = append(view.Members, router.Member{Name: m.Name, Addr: m.HTTPAddr, State: string(m.State), ConfigVersion: m.ConfigVersion,
			CannotReachSelf: slices.Contains(m.CannotReach, self)})
	}
	n.router.SetView(view)
}

// Addr is the HTTP address the node serves on.
func (n *Node) Addr() string { return n.ln.Addr().String() }

// GossipAddr is the gossip address peers join ("" standalone).
func (n *Node) GossipAddr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.gossip == nil {
		return ""
	}
	return n.gossip.GossipAddr()
}

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Node.Name }

// Router exposes the node's router (tests and the demo read from it).
func (n *Node) Router() *router.Router { return n.router }

// Ring is the node's current ring (nil standalone).
func (n *Node) Ring() *ring.Ring {
	if n.table == nil {
		return nil
	}
	return n.table.Current()
}

// Reload applies a new configuration's tenants, limits and upstreams.
func (n *Node) Reload(cfg *config.Config) error {
	if err := n.router.Reload(cfg); err != nil {
		return err
	}
	n.mu.Lock()
	n.tenantNames = n.router.Moves().Names()
	g := n.gossip
	n.mu.Unlock()
	if g != nil {
		_ = g.SetConfigVersion(n.router.ConfigVersion()) // logged by gossip; carried by push/pull anyway
	}
	if n.table != nil {
		// A tenant that joined or left a team moves like in a ring
		// change (its state handed over to its new owner), once every
		// member asks for the new placement (agreePins).
		n.pins.mu.Lock()
		n.pins.setWant(n.router.Moves().Pins())
		hash := n.pins.wantHash
		n.pins.mu.Unlock()
		if n.gossip != nil {
			if err := n.gossip.SetPins(hash); err != nil {
				n.log.Warn("pins", "phase", "announce", "error", err.Error())
			}
			n.agreePins(n.gossip.Members())
		}
	}
	return nil
}

// ReloadFromSource reads the config again from Options.Source and applies
// it (Reload): on SIGHUP (trigger "sighup") and POST /admin/reload
// ("admin"). A config that does not parse, does not validate or cannot be
// applied is refused with the reason, and the one running goes on. The
// outcome is logged and shown in /cluster.
func (n *Node) ReloadFromSource(trigger string) router.ReloadResult {
	res := router.ReloadResult{At: time.Now(), Trigger: trigger}
	n.reload.mu.Lock()
	defer n.reload.mu.Unlock()
	var err error
	if n.reload.source == nil {
		err = errors.New("no config source")
	} else if next, e := n.reload.source(); e != nil {
		err = e
	} else {
		restart := next.RestartOnly(n.router.Config())
		if e := n.Reload(next); e != nil {
			err = e
		} else {
			res.OK, res.ConfigVersion, res.RestartRequired = true, n.router.ConfigVersion(), restart
			logWarnings(n.log, next.Warnings(), startOnly)
			if len(restart) > 0 {
				n.log.Warn("reload", "trigger", trigger, "restart_required", restart,
					"detail", "these tables or keys changed in the file and are read at start only: their old values stay until a restart")
			}
		}
	}
	if err != nil {
		res.Error = err.Error()
		res.ConfigVersion = n.router.ConfigVersion()
		n.log.Error("reload", "trigger", trigger, "error", res.Error, "config_version", res.ConfigVersion)
	}
	n.router.NoteReload(res)
	return res
}

// Drain leaves gracefully: /readyz turns 503 and the node tells the cluster
// it is draining (peers take its tenants over and stop routing to it);
// requests and streams in flight finish, at most the drain timeout; then it
// leaves the gossip and stops serving. It reports whether everything in
// flight finished.
func (n *Node) Drain() bool {
	timeout := n.cfg.Node.DrainTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	n.router.BeginDrain()
	if n.gossip != nil {
		if err := n.gossip.SetState(gossip.StateDraining); err != nil {
			n.log.Warn("drain", "phase", "announce", "error", err.Error())
		}
	}
	clean := n.router.WaitIdle(min(n.grace, timeout), timeout)
	n.stop(true)
	n.log.Info("drain", "phase", "done", "clean", clean)
	return clean
}

// Close stops the node at once, cutting what is in flight, without leaving
// the gossip: to its peers it looks like a crash. Its connections are
// closed as a killed process's are, not answered until they idle.
func (n *Node) Close() error {
	err := n.ln.Close()
	n.conns.closeAll()
	n.stop(false)
	return err
}

// track keeps the server's open connections for Close
// (fasthttp.Server.ConnState). fasthttp calls it for every request too
// (active, idle): those take no lock.
func (oc *openConns) track(c net.Conn, st fasthttp.ConnState) {
	switch st {
	case fasthttp.StateNew:
		oc.mu.Lock()
		oc.set[c] = struct{}{}
		oc.mu.Unlock()
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		oc.mu.Lock()
		delete(oc.set, c)
		oc.mu.Unlock()
	}
}

// closeAll closes every open connection.
func (oc *openConns) closeAll() {
	oc.mu.Lock()
	for c := range oc.set {
		_ = c.Close()
	}
	oc.mu.Unlock()
}

func (n *Node) stop(leave bool) {
	n.stopOnce.Do(func() {
		n.stopWatchdog()
		n.mu.Lock()
		g := n.gossip
		n.mu.Unlock()
		if g != nil {
			if leave {
				if err := g.Leave(time.Second); err != nil {
					n.log.Warn("drain", "phase", "leave", "error", err.Error())
				}
			} else {
				_ = g.Shutdown()
			}
		}
		if n.table != nil {
			n.table.Close()
		}
		if leave && g == nil && n.store != nil {
			// Standalone: the next process on this config takes over.
			if err := n.mover.Flush(n.tenants()); err != nil {
				n.log.Warn("drain", "phase", "flush", "error", err.Error())
			}
		}
		n.mover.Close()
		if n.store != nil {
			_ = n.store.Close()
		}
		n.closeLeases(leave)
		n.shutdown()
		n.router.Close()
	})
}

// closeLeases stops the lease work; leaving, the node first gives back its
// blocks and slots, so what it did not use is the cluster's again at once
// (a crash leaves them to lapse).
func (n *Node) closeLeases(giveBack bool) {
	if giveBack {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := n.leases.leaser.GiveBack(ctx); err != nil {
			n.log.Warn("drain", "phase", "give_back_leases", "error", err.Error())
		}
		cancel()
	}
	n.leases.stop()
	if n.conn != nil {
		_ = n.conn.Close()
	}
}

func (n *Node) shutdown() {
	done := make(chan struct{})
	go func() {
		_ = n.server.Shutdown()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		n.log.Warn("drain", "phase", "shutdown_timeout")
		_ = n.ln.Close()
	}
	select {
	case err := <-n.served:
		if err != nil && !errors.Is(err, net.ErrClosed) {
			n.log.Warn("http", "error", err.Error())
		}
	default:
	}
}

// redisConfig is the connection the [redis] table asks for: a plain Redis,
// a Cluster or a Sentinel-watched master, with AUTH and TLS as set.
func redisConfig(r config.Redis, log *slog.Logger) redisconn.Config {
	c := redisconn.Config{Addrs: r.Addresses(), MasterName: r.MasterName, Username: r.Username, Password: r.Password,
		Timeout: r.Timeout, Logger: log}
	if r.TLS {
		c.TLS = &redisconn.TLS{CAFile: r.TLSCAFile, ServerName: r.TLSServerName}
	}
	return c
}
