package snapshot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringgate/ringgate/redisconn"
)

// LoadMany loads the snapshots of several tenants in one pipelined round
// trip; the result is in the order of tenants, nil where a tenant has none
// (or its value does not decode: that is counted and logged, as in Load).
func (s *Store) LoadMany(ctx context.Context, tenants []string) ([]*Snapshot, error) {
	out := make([]*Snapshot, len(tenants))
	if len(tenants) == 0 {
		return out, nil
	}
	if s.closed.Load() {
		return nil, fmt.Errorf("load %d snapshots: %w", len(tenants), ErrClosed)
	}
	cmds := make([]*redis.StringCmd, len(tenants))
	err := s.conn.Call(ctx, time.Duration(len(tenants))*perItem, func(cctx context.Context) error {
		pipe := s.client.Pipeline()
		for i, t := range tenants {
			cmds[i] = pipe.Get(cctx, s.Key(t))
		}
		_, err := pipe.Exec(cctx)
		if errors.Is(err, redis.Nil) {
			err = nil // some keys absent: per-command results say which
		}
		return err
	})
	if errors.Is(err, redisconn.ErrUnavailable) {
		s.skipped.Add(1)
		return nil, fmt.Errorf("load %d snapshots: %w", len(tenants), ErrUnavailable)
	}
	if err != nil {
		s.loadFailed.Add(1)
		return nil, fmt.Errorf("load %d snapshots: %w", len(tenants), err)
	}
	for i, cmd := range cmds {
		b, err := cmd.Bytes()
		if errors.Is(err, redis.Nil) {
			s.misses.Add(1)
			continue
		}
		if err != nil {
			s.loadFailed.Add(1)
			continue
		}
		sn, err := Decode(b)
		if err == nil && sn.Tenant != tenants[i] {
			err = fmt.Errorf("%w: snapshot of tenant %.64q under the key of %.64q", ErrFormat, sn.Tenant, tenants[i])
		}
		if err != nil {
			s.decodeErr.Add(1)
			s.log.Warn("snapshot does not decode", "tenant", tenants[i], "bytes", len(b), "err", err)
			continue
		}
		s.loaded.Add(1)
		out[i] = &sn
	}
	return out, nil
}
