package node

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringgate/ringgate/bench/seedlimit"
	"github.com/ringgate/ringgate/internal/redistest"
	"github.com/ringgate/ringgate/limiter"
)

// BenchmarkDecisionVsRedis compares, in one run, ringgate's admission
// decision (all three dimensions, in RAM) with the seed article's
// one-Lua-call-per-request sliding window on a real redis-server over
// loopback, for a tenant holding 1000 charges in its window.
func BenchmarkDecisionVsRedis(b *testing.B) {
	const held = 1000
	b.Run("ringgate", func(b *testing.B) {
		tn := limiter.NewTenant(limiter.Limits{Requests: 1 << 40, Tokens: 1 << 50, Concurrency: 1 << 30}, time.Minute, 10*time.Minute)
		now := time.Now().UnixNano()
		for i := 0; i < held; i++ {
			tn.Admit(now, 100)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			now += 1000
			tk, _ := tn.Admit(now, 100)
			tn.Finish(now, &tk, 80)
		}
	})
	b.Run("redis-lua-per-request", func(b *testing.B) {
		rds := redistest.Start(b)
		c := redis.NewClient(&redis.Options{Addr: rds.Addr()})
		b.Cleanup(func() { _ = c.Close() })
		ctx := context.Background()
		var id atomic.Int64
		call := func(now int64) {
			n := strconv.FormatInt(id.Add(1), 10)
			if _, err := seedlimit.Take(ctx, c, "tpm:bench", now, 60000, int64(1)<<50, 100, n); err != nil {
				b.Fatal(err)
			}
		}
		// One charge every 60 ms of simulated time: the 60 s window holds
		// a steady 1000 entries, each call trimming one and adding one.
		const step = 60000 / held
		now := time.Now().UnixMilli()
		for i := 0; i < held; i++ {
			now += step
			call(now)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			now += step
			call(now)
		}
	})
	// The floor of any Redis-per-request design: one O(1) command.
	b.Run("redis-incr-per-request", func(b *testing.B) {
		rds := redistest.Start(b)
		c := redis.NewClient(&redis.Options{Addr: rds.Addr()})
		b.Cleanup(func() { _ = c.Close() })
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := c.IncrBy(ctx, "rpm:bench", 1).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
