package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringgate/ringgate/redisconn"
)

// Store defaults and fixed timings.
const (
	DefaultTimeout = redisconn.DefaultTimeout
	DefaultPrefix  = "ringgate"

	// perItem is the extra budget of SaveBatch for each snapshot in it:
	// Redis and the socket need time for a large pipeline.
	perItem = 20 * time.Microsecond
	// breakerWindow is how long calls fail fast after a failed call.
	breakerWindow = redisconn.BreakerWindow
)

// ErrUnavailable is returned without touching the network while the
// breaker is open: a call failed less than 500 ms ago.
var ErrUnavailable = redisconn.ErrUnavailable

// ErrClosed is returned by calls on a closed Store.
var ErrClosed = redisconn.ErrClosed

// StoreConfig configures a Store.
type StoreConfig struct {
	// Conn is the Redis connection to use, shared with other stores; nil:
	// the Store makes its own from the fields below and closes it.
	Conn       *redisconn.Conn
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
	BreakerOpens uint64 // times a failure opened the breaker (of the Conn, shared)
}

// Store saves and loads tenant snapshots in Redis under
// Prefix+":snap:{tenant}" (a hash tag: on a Cluster every key of a tenant
// lives in one slot). Every call is bounded by the connection's budget and
// guarded by its breaker; it is safe for concurrent use and starts no
// goroutines of its own (go-redis keeps its pool's).
type Store struct {
	conn   *redisconn.Conn
	owned  bool // conn made by NewStore: closed by Close
	client redis.UniversalClient
	prefix string
	log    *slog.Logger
	closed atomic.Bool

	saved, batches, saveFailed, skipped   atomic.Uint64
	loaded, misses, loadFailed, decodeErr atomic.Uint64
}

// NewStore makes a Store. It does not contact Redis: the first call does
// (go-redis dials its idle connections in the background).
func NewStore(cfg StoreConfig) (*Store, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	conn, owned := cfg.Conn, false
	if conn == nil {
		c, err := redisconn.New(redisconn.Config{Addrs: cfg.Addrs, MasterName: cfg.MasterName, Password: cfg.Password,
			Timeout: cfg.Timeout, Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("snapshot: %w", err)
		}
		conn, owned = c, true
	}
	return &Store{conn: conn, owned: owned, client: conn.Client(), prefix: cfg.Prefix, log: cfg.Logger}, nil
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
		err = s.conn.Call(ctx, time.Duration(n)*perItem, func(cctx context.Context) error {
			pipe := s.client.Pipeline()
			start := 0
			for i, sn := range snaps {
				if ends[i] < 0 {
					continue
				}
				pipe.Set(cctx, s.Key(sn.Tenant), buf[start:ends[i]:ends[i]], ttl)
				start = ends[i]
			}
			_, err := pipe.Exec(cctx)
			return err
		})
		switch {
		case errors.Is(err, redisconn.ErrUnavailable):
			s.skipped.Add(1)
			err = fmt.Errorf("save %d snapshots: %w", n, err)
		case err != nil:
			s.saveFailed.Add(1)
			err = fmt.Errorf("save %d snapshots: %w", n, err)
		default:
			s.batches.Add(1)
			s.saved.Add(uint64(n))
		}
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
	var b []byte
	err := s.conn.CallKey(ctx, s.Key(tenant), 0, func(cctx context.Context) (err error) {
		b, err = s.client.Get(cctx, s.Key(tenant)).Bytes()
		return err
	})
	if errors.Is(err, redis.Nil) {
		s.misses.Add(1)
		return nil, nil
	}
	if errors.Is(err, redisconn.ErrUnavailable) {
		s.skipped.Add(1)
		return nil, fmt.Errorf("load snapshot of %.64q: %w", tenant, ErrUnavailable)
	}
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
		BreakerOpens: s.conn.BreakerOpens(),
	}
}

// Available reports whether a call now would reach Redis: false while the
// breaker is open after a failure, or after Close.
func (s *Store) Available() bool {
	return !s.closed.Load() && s.conn.Available()
}

// Close closes the Store, and its Redis connection if it made it. Calls
// after it return ErrClosed.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) || !s.owned {
		return nil
	}
	return s.conn.Close()
}
