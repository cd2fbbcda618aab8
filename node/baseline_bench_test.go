package node

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringgate/ringgate/internal/redistest"
	"github.com/ringgate/ringgate/limiter"
)

// seedScript is the seed article's sliding window in Redis: a sorted set of
// charges, trimmed and summed on every call. It is the baseline ringgate's
// in-RAM decision is measured against: one Redis round trip per request.
var seedScript = redis.NewScript(`
local key = KEYS[1]
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local max_limit = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local req_id = ARGV[5]
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local entries = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
local current_usage = 0
for i = 1, #entries, 2 do
  local raw_val = entries[i]
  local sep = string.find(raw_val, ":")
  if sep then
    current_usage = current_usage + (tonumber(string.sub(raw_val, 1, sep - 1)) or 0)
  end
end
if current_usage + cost <= max_limit then
  redis.call('ZADD', key, now, tostring(cost) .. ":" .. req_id)
  redis.call('PEXPIRE', key, window + 1000)
  return {1, max_limit - (current_usage + cost), 0}
end
return {0, max_limit - current_usage, 0}
`)

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
			if err := seedScript.Run(ctx, c, []string{"tpm:bench"}, now, 60000, int64(1)<<50, 100, n).Err(); err != nil {
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
