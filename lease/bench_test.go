package lease

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringgate/ringgate/internal/redistest"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/redisconn"
)

// countingStore counts the calls that reach the store.
type countingStore struct {
	Store
	calls atomic.Int64
}

func (s *countingStore) Grant(ctx context.Context, key string, g GrantRequest) (GrantReply, error) {
	s.calls.Add(1)
	return s.Store.Grant(ctx, key, g)
}

func (s *countingStore) Return(ctx context.Context, key string, r ReturnRequest) (int64, error) {
	s.calls.Add(1)
	return s.Store.Return(ctx, key, r)
}

func (s *countingStore) HoldSlots(ctx context.Context, key, node string, want, limit, now int64, ttl time.Duration) (int64, error) {
	s.calls.Add(1)
	return s.Store.HoldSlots(ctx, key, node, want, limit, now, ttl)
}

// seedWindow is the seed article's provider limit: one Lua call per
// request on a sorted set of the window's charges.
var seedWindow = redis.NewScript(`
local key = KEYS[1]
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local max_limit = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local n = redis.call('ZCARD', key)
if n + 1 <= max_limit then
  redis.call('ZADD', key, now, ARGV[4])
  redis.call('PEXPIRE', key, window + 1000)
  return 1
end
return 0
`)

// BenchmarkProviderLimit: admissions per second and Redis calls per
// admission for one provider budget (rpm and tpm) on a real redis-server,
// three nodes' worth of leasers against one Redis, requests from every
// core — leased blocks against the seed's one Lua call per request. The
// limit is high enough not to refuse: this is the cost of coordination.
func BenchmarkProviderLimit(b *testing.B) {
	srv := redistest.Start(b)
	b.Run("leased", func(b *testing.B) {
		benchLeased(b, srv.Addr(), limiter.Limits{Requests: 1 << 40, Tokens: 1 << 50}, time.Minute)
	})
	// At the limit: 50 000 requests a second for three nodes asking far
	// more; the calls are counted per admitted request.
	b.Run("leased-at-limit", func(b *testing.B) { benchLeased(b, srv.Addr(), limiter.Limits{Requests: 50000}, time.Second) })
	b.Run("redis-lua-per-request", func(b *testing.B) {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer c.Close()
		ctx := context.Background()
		var id atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				n := id.Add(1)
				if err := seedWindow.Run(ctx, c, []string{"seed:bench"}, time.Now().UnixMilli(), 60000, int64(1)<<40, n).Err(); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(1, "redis_calls/op")
	})
}

func benchLeased(b *testing.B, addr string, limits limiter.Limits, window time.Duration) {
	conn, err := redisconn.New(redisconn.Config{Addrs: []string{addr}, Timeout: 50 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	rs := NewRedisStore(conn, "bench")
	if err := rs.Load(context.Background()); err != nil {
		b.Fatal(err)
	}
	st := &countingStore{Store: rs}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := Config{Key: "bench-" + strconv.Itoa(b.N), Limits: limits, Window: window}
	var budgets []*Budget
	for i := range 3 {
		l := NewLeaser(LeaserConfig{Store: st, Node: "n" + strconv.Itoa(i)})
		budgets = append(budgets, l.Budget(cfg, func() int { return 3 }))
		go l.Run(ctx)
	}
	var refused, next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		bd := budgets[next.Add(1)%3]
		for pb.Next() {
			now := time.Now().UnixNano()
			tk, d := bd.Take(now, 500)
			if !d.Allowed {
				if d.Renewal != nil {
					<-d.Renewal
				}
				refused.Add(1)
				continue
			}
			bd.Finish(now, &tk, 400)
		}
	})
	b.StopTimer()
	admitted := max(1, int64(b.N)-refused.Load())
	b.ReportMetric(float64(st.calls.Load())/float64(admitted), "redis_calls/admitted")
}
