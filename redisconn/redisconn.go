// Package redisconn is ringgate's connection to Redis: one go-redis client
// (plain, Sentinel or Cluster) whose every call is bounded by a small
// budget (15 ms by default) and guarded by a breaker, so a dead or hung
// Redis costs a caller at most one budget and then nothing until it
// answers again. The snapshot store and the lease store share one Conn,
// and with it one view of whether Redis is there.
//
// It knows nothing of what is stored: keys, scripts and formats belong to
// the packages that use it.
package redisconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Defaults and fixed timings.
const (
	DefaultTimeout = 15 * time.Millisecond
	// BreakerWindow is how long calls fail fast after a failed call.
	BreakerWindow = 500 * time.Millisecond
	// maxDialTimeout caps the dial timeout (4×Timeout) of go-redis's own
	// background dials; a call's dial is bounded by the call's budget.
	maxDialTimeout = time.Second
)

// ErrUnavailable is returned without touching the network while the
// breaker is open: a call failed less than BreakerWindow ago.
var ErrUnavailable = errors.New("redis unavailable (breaker open)")

// ErrClosed is returned by calls on a closed Conn.
var ErrClosed = errors.New("redis connection closed")

// Config configures a Conn.
type Config struct {
	Addrs      []string      // one addr: plain Redis; several: Cluster (or Sentinel with MasterName)
	MasterName string        // Sentinel master name, optional
	Username   string        // ACL user, optional
	Password   string        // optional
	TLS        *TLS          // nil: plain TCP
	Timeout    time.Duration // budget of one call, default 15 ms
	Logger     *slog.Logger  // default: discard
	// OnCall, if set, is told of every call's outcome: how long it took
	// and its error (nil, or a reply error: Redis answered); a call the
	// breaker skipped reports ErrUnavailable and no time. It must not
	// block: metrics.
	OnCall func(took time.Duration, err error)
}

// TLS is how to reach Redis over TLS.
type TLS struct {
	CAFile     string // PEM roots to verify the server with; "": the system's
	ServerName string // the name its certificate must hold; "": the address's host
}

// config is t as a crypto/tls config.
func (t *TLS) config() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("redis tls: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redis tls: %s holds no PEM certificate", t.CAFile)
		}
	}
	return c, nil
}

// Conn is a Redis client with a per-call budget and a breaker. It is safe
// for concurrent use.
type Conn struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // client, when Redis is a Cluster
	timeout time.Duration
	log     *slog.Logger
	brk     breaker
	// masters are the breakers of a Cluster's masters, by address, for
	// calls on one key (CallKey): one dead master fails fast only the
	// calls that need it.
	masters sync.Map // string → *breaker
	closed  atomic.Bool
	onCall  func(time.Duration, error)
	opens   atomic.Uint64
	skipped atomic.Uint64
}

// New makes a Conn. It does not contact Redis: the first call does
// (go-redis dials its idle connections in the background).
func New(cfg Config) (*Conn, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("redis: no address")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("redis: negative timeout %v", cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var tlsConfig *tls.Config
	if cfg.TLS != nil {
		c, err := cfg.TLS.config()
		if err != nil {
			return nil, err
		}
		tlsConfig = c
	}
	t := cfg.Timeout
	client := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:      cfg.Addrs,
		MasterName: cfg.MasterName,
		Username:   cfg.Username,
		Password:   cfg.Password,
		TLSConfig:  tlsConfig,

		// Without ContextTimeoutEnabled a context deadline does not bound
		// the socket read; with it, a read or write stops at the earlier of
		// the deadline and Read/WriteTimeout.
		ContextTimeoutEnabled: true,
		ReadTimeout:           t,
		WriteTimeout:          t,
		DialTimeout:           min(4*t, maxDialTimeout),
		DialerRetries:         1, // default 5 with 100 ms pauses
		MaxRetries:            -1,
		PoolTimeout:           t,
		MinIdleConns:          2,
		// Pipelines run on the main pool, whose MinIdleConns are dialled
		// ahead; the dedicated pipeline pool never pre-dials, so the first
		// batch after an idle spell would pay a dial and handshake.
		PipelinePoolSize: -1,
		// Fewer handshake round trips on every dial: no CLIENT SETINFO
		// (older servers reject it anyway), no CLIENT MAINT_NOTIFICATIONS.
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	cluster, _ := client.(*redis.ClusterClient)
	return &Conn{client: client, cluster: cluster, timeout: t, log: cfg.Logger, onCall: cfg.OnCall}, nil
}

// Client is the underlying client, for callers that run their commands
// inside Call.
func (c *Conn) Client() redis.UniversalClient { return c.client }

// Timeout is the budget of one call.
func (c *Conn) Timeout() time.Duration { return c.timeout }

// Call runs fn with a context bounded by the budget plus extra (a large
// pipeline needs more), unless the breaker is open or the Conn closed, and
// feeds its outcome to the breaker. redis.Nil and other reply errors mean
// Redis answered: they keep the breaker closed.
func (c *Conn) Call(ctx context.Context, extra time.Duration, fn func(ctx context.Context) error) error {
	return c.call(ctx, &c.brk, "", extra, fn)
}

// CallKey is Call for commands on one key, or on keys that share its hash
// slot. In a Cluster its breaker is that of the master serving the key:
// a dead master fails fast the calls it would serve, not the others. With
// one breaker for the whole Cluster, a node whose snapshots lived on the
// dead master kept failing its provider budget's calls too, on a healthy
// master, and each time the budget fell back to a fresh strict share:
// nothing admitted through a failover (TestRedisFailoverUnderLoad).
func (c *Conn) CallKey(ctx context.Context, key string, extra time.Duration, fn func(ctx context.Context) error) error {
	if c.cluster == nil {
		return c.Call(ctx, extra, fn)
	}
	lctx, cancel := context.WithTimeout(ctx, c.timeout)
	m, err := c.cluster.MasterForKey(lctx, key) // from the slot map in hand, unless none was loaded yet
	cancel()
	if err != nil {
		return c.Call(ctx, extra, fn)
	}
	addr := m.Options().Addr
	b, ok := c.masters.Load(addr)
	if !ok {
		b, _ = c.masters.LoadOrStore(addr, &breaker{})
	}
	return c.call(ctx, b.(*breaker), addr, extra, fn)
}

// call is Call on the breaker brk (of the master at addr; "": of all of
// Redis).
func (c *Conn) call(ctx context.Context, brk *breaker, addr string, extra time.Duration, fn func(ctx context.Context) error) error {
	if c.closed.Load() {
		return ErrClosed
	}
	start := time.Now()
	probe, ok := brk.allow(start)
	if !ok {
		c.skipped.Add(1)
		if c.onCall != nil {
			c.onCall(0, ErrUnavailable)
		}
		return ErrUnavailable
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout+extra)
	err := fn(cctx)
	cancel()
	c.done(ctx, brk, addr, err, probe)
	if c.onCall != nil {
		c.onCall(time.Since(start), err)
	}
	return err
}

// done feeds a call's outcome to its breaker. A reply error (Redis
// answered) and the caller's own cancellation say nothing about Redis's
// health; any other error opens the breaker.
func (c *Conn) done(ctx context.Context, brk *breaker, addr string, err error, probe bool) {
	var reply redis.Error
	switch {
	case err == nil || errors.As(err, &reply):
		if brk.succeed(probe) {
			c.log.Info("redis available again", masterAttr(addr)...)
		}
	case errors.Is(ctx.Err(), context.Canceled):
		brk.release(probe)
	default:
		if c.cluster != nil {
			// go-redis reloads a Cluster's slot map on MOVED, or once a
			// minute; a dead master sends no MOVED, so without this its
			// slots would stay routed to it for up to a minute after its
			// replica took over. The reload runs in the background, one at
			// a time, at most every 200 ms.
			c.cluster.ReloadState(context.Background())
		}
		if brk.fail(time.Now(), probe) {
			c.opens.Add(1)
			c.log.Warn("redis unavailable, failing fast", append(masterAttr(addr), "for", BreakerWindow.String(), "err", err.Error())...)
		}
	}
}

// masterAttr names a Cluster master's breaker in a log line (none for the
// breaker of all of Redis).
func masterAttr(addr string) []any {
	if addr == "" {
		return nil
	}
	return []any{"master", addr}
}

// BreakerOpens counts the times a failure opened the breaker.
func (c *Conn) BreakerOpens() uint64 { return c.opens.Load() }

// Skipped counts the calls refused while the breaker was open.
func (c *Conn) Skipped() uint64 { return c.skipped.Load() }

// Available reports whether a call now would reach Redis: false while the
// breaker is open after a failure, or after Close.
func (c *Conn) Available() bool {
	return !c.closed.Load() && c.brk.available(time.Now())
}

// Close closes the client. Calls after it return ErrClosed.
func (c *Conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	return c.client.Close()
}

// breaker fails calls fast for BreakerWindow after a failure. Once the
// window is over one call at a time goes through as a probe; its success
// closes the breaker, its failure opens it again.
type breaker struct {
	mu      sync.Mutex
	open    bool
	until   time.Time // end of the fail-fast window while open
	probing bool      // a probe is in flight
}

// allow reports whether a call may go to Redis, and whether it is the probe.
func (b *breaker) allow(now time.Time) (probe, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !b.open:
		return false, true
	case now.Before(b.until) || b.probing:
		return false, false
	default:
		b.probing = true
		return true, true
	}
}

// succeed closes the breaker; it reports whether it was open.
func (b *breaker) succeed(probe bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	was := b.open
	b.open = false
	return was
}

// fail opens the breaker for another window; it reports whether it was
// closed.
func (b *breaker) fail(now time.Time, probe bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	was := b.open
	b.open = true
	b.until = now.Add(BreakerWindow)
	return !was
}

// release ends a probe that told nothing.
func (b *breaker) release(probe bool) {
	if !probe {
		return
	}
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

func (b *breaker) available(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.open || (!now.Before(b.until) && !b.probing)
}
