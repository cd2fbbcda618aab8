package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Store defaults and fixed timings.
const (
	DefaultTimeout = 15 * time.Millisecond
	DefaultPrefix  = "ringgate"

	// perItem is the extra budget of SaveBatch for each snapshot in it:
	// Redis and the socket need time for a large pipeline.
	perItem = 20 * time.Microsecond
	// breakerWindow is how long calls fail fast after a failed call.
	breakerWindow = 500 * time.Millisecond
	// maxDialTimeout caps the dial timeout (4×Timeout) of go-redis's own
	// background dials; a call's dial is bounded by the call's budget.
	maxDialTimeout = time.Second
)

// ErrUnavailable is returned without touching the network while the
// breaker is open: a call failed less than 500 ms ago.
var ErrUnavailable = errors.New("snapshot: redis unavailable (breaker open)")

// ErrClosed is returned by calls on a closed Store.
var ErrClosed = errors.New("snapshot: store closed")

// StoreConfig configures a Store.
type StoreConfig struct {
	Addrs      []string      // one addr: plain Redis; several: Cluster (or Sentinel with MasterName)
	MasterName string        // Sentinel master name, optional
	Password   string        // optional
	Timeout    time.Duration // budget of one call, default 15 ms
	Prefix     string        // key prefix, default "ringgate"
	Logger     *slog.Logger  // default: discard
}

// Stats are a Store's counters since NewStore.
type Stats struct {
	Saved        uint64 // snapshots written
	SaveBatches  uint64 // SaveBatch calls that succeeded (one round trip each)
	SaveFailures uint64 // SaveBatch calls that returned an error (Redis, timeout or invalid snapshots)
	Skipped      uint64 // SaveBatch and Load calls refused while the breaker was open
	Loaded       uint64 // snapshots read and decoded
	LoadMisses   uint64 // Load calls that found no snapshot
	LoadFailures uint64 // Load calls that failed (error or timeout), not counting decode errors
	DecodeErrors uint64 // values under a snapshot key that did not decode
	BreakerOpens uint64 // times a failure opened the breaker
}

// Store saves and loads tenant snapshots in Redis under
// Prefix+":snap:{tenant}" (a hash tag: on a Cluster every key of a tenant
// lives in one slot). Every call is bounded by the configured Timeout and
// guarded by a breaker; it is safe for concurrent use and starts no
// goroutines of its own (go-redis keeps its pool's).
type Store struct {
	client  redis.UniversalClient
	timeout time.Duration
	prefix  string
	log     *slog.Logger
	brk     breaker
	closed  atomic.Bool

	saved, batches, saveFailed, skipped          atomic.Uint64
	loaded, misses, loadFailed, decodeErr, opens atomic.Uint64
}

// NewStore makes a Store. It does not contact Redis: the first call does
// (go-redis dials its idle connections in the background).
func NewStore(cfg StoreConfig) (*Store, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("snapshot: no redis address")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("snapshot: negative timeout %v", cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	t := cfg.Timeout
	client := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:      cfg.Addrs,
		MasterName: cfg.MasterName,
		Password:   cfg.Password,

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
	return &Store{client: client, timeout: t, prefix: cfg.Prefix, log: cfg.Logger}, nil
}

// Key is the Redis key of a tenant's snapshot.
func (s *Store) Key(tenant string) string {
	return s.prefix + ":snap:{" + tenant + "}"
}

// SaveBatch writes snaps, each under its tenant's key with ttl, in one
// pipelined round trip (one per shard on a Cluster), within Timeout plus
// 20 µs per snapshot. Snapshots that fail Validate are left out and
// reported in the error; the others are still written. With the breaker
// open it returns ErrUnavailable at once.
func (s *Store) SaveBatch(ctx context.Context, snaps []*Snapshot, ttl time.Duration) error {
	if len(snaps) == 0 {
		return nil
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("save %d snapshots: ttl %v under 1ms", len(snaps), ttl)
	}
	if s.closed.Load() {
		return fmt.Errorf("save %d snapshots: %w", len(snaps), ErrClosed)
	}
	probe, ok := s.brk.allow(time.Now())
	if !ok {
		s.skipped.Add(1)
		return fmt.Errorf("save %d snapshots: %w", len(snaps), ErrUnavailable)
	}

	// All values in one buffer, sliced once it stops growing.
	var invalid []error
	buf := make([]byte, 0, 512*len(snaps))
	ends := make([]int, len(snaps))
	for i, sn := range snaps {
		if err := sn.Validate(); err != nil {
			invalid = append(invalid, fmt.Errorf("tenant %.64q: %w", sn.Tenant, err))
			ends[i] = -1
			continue
		}
		buf = Encode(buf, sn)
		ends[i] = len(buf)
	}
	n := len(snaps) - len(invalid)
	var err error
	if n > 0 {
		cctx, cancel := context.WithTimeout(ctx, s.timeout+time.Duration(n)*perItem)
		pipe := s.client.Pipeline()
		start := 0
		for i, sn := range snaps {
			if ends[i] < 0 {
				continue
			}
			pipe.Set(cctx, s.Key(sn.Tenant), buf[start:ends[i]:ends[i]], ttl)
			start = ends[i]
		}
		_, err = pipe.Exec(cctx)
		cancel()
		s.done(ctx, err, probe)
		if err != nil {
			s.saveFailed.Add(1)
			err = fmt.Errorf("save %d snapshots: %w", n, err)
		} else {
			s.batches.Add(1)
			s.saved.Add(uint64(n))
		}
	} else {
		s.brk.release(probe)
	}
	if len(invalid) > 0 {
		if err == nil {
			s.saveFailed.Add(1)
		}
		err = errors.Join(err, fmt.Errorf("%d snapshots not saved: %w", len(invalid), errors.Join(invalid...)))
	}
	return err
}

// Load reads a tenant's snapshot within Timeout: (nil, nil) when there is
// none. A value that does not decode, or that names another tenant, is an
// error wrapping ErrFormat or ErrVersion. With the breaker open it returns
// ErrUnavailable at once.
func (s *Store) Load(ctx context.Context, tenant string) (*Snapshot, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("load snapshot of %.64q: %w", tenant, ErrClosed)
	}
	probe, ok := s.brk.allow(time.Now())
	if !ok {
		s.skipped.Add(1)
		return nil, fmt.Errorf("load snapshot of %.64q: %w", tenant, ErrUnavailable)
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	b, err := s.client.Get(cctx, s.Key(tenant)).Bytes()
	cancel()
	if errors.Is(err, redis.Nil) {
		s.done(ctx, nil, probe)
		s.misses.Add(1)
		return nil, nil
	}
	s.done(ctx, err, probe)
	if err != nil {
		s.loadFailed.Add(1)
		return nil, fmt.Errorf("load snapshot of %.64q: %w", tenant, err)
	}
	sn, err := Decode(b)
	if err == nil && sn.Tenant != tenant {
		err = fmt.Errorf("%w: snapshot of tenant %.64q under the key of %.64q", ErrFormat, sn.Tenant, tenant)
	}
	if err != nil {
		s.decodeErr.Add(1)
		s.log.Warn("snapshot does not decode", "tenant", tenant, "bytes", len(b), "err", err)
		return nil, fmt.Errorf("load snapshot of %.64q: %w", tenant, err)
	}
	s.loaded.Add(1)
	return &sn, nil
}

// done feeds a call's outcome to the breaker. A reply error (Redis
// answered) and the caller's own cancellation say nothing about Redis's
// health; any other error opens the breaker.
func (s *Store) done(ctx context.Context, err error, probe bool) {
	var reply redis.Error
	switch {
	case err == nil || errors.As(err, &reply):
		if s.brk.succeed(probe) {
			s.log.Info("snapshot store: redis available again")
		}
	case errors.Is(ctx.Err(), context.Canceled):
		s.brk.release(probe)
	default:
		if s.brk.fail(time.Now(), probe) {
			s.opens.Add(1)
			s.log.Warn("snapshot store: redis unavailable, failing fast", "for", breakerWindow, "err", err)
		}
	}
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{
		Saved:        s.saved.Load(),
		SaveBatches:  s.batches.Load(),
		SaveFailures: s.saveFailed.Load(),
		Skipped:      s.skipped.Load(),
		Loaded:       s.loaded.Load(),
		LoadMisses:   s.misses.Load(),
		LoadFailures: s.loadFailed.Load(),
		DecodeErrors: s.decodeErr.Load(),
		BreakerOpens: s.opens.Load(),
	}
}

// Available reports whether a call now would reach Redis: false while the
// breaker is open after a failure, or after Close.
func (s *Store) Available() bool {
	return !s.closed.Load() && s.brk.available(time.Now())
}

// Close closes the Redis client. Calls after it return ErrClosed.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	return s.client.Close()
}

// breaker fails calls fast for breakerWindow after a failure. Once the
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
	b.until = now.Add(breakerWindow)
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
