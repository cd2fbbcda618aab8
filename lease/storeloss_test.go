package lease

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/internal/knownlimit"
	"github.com/ringgate/ringgate/internal/redistest"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/redisconn"
)

// Tests of a store that lost its data (a Redis restarted without
// persistence), found by review. The first is a regression test; the other
// two reproduce known limits (docs/limits.md) and run only with
// RINGGATE_KNOWN_LIMITS=1: they fail today, and pass once fixed.

// reviewStore wraps a Store: failHistory makes the next n Returns that
// carry a node's history (no grant, no generation, uses) fail as a timed
// out call that never reached the store does.
type reviewStore struct {
	Store
	mu          sync.Mutex
	failHistory int
	failed      int
}

func (s *reviewStore) Return(ctx context.Context, key string, r ReturnRequest) (int64, error) {
	s.mu.Lock()
	if s.failHistory > 0 && r.Gen == 0 && r.Granted == (Amount{}) && len(r.Used) > 0 {
		s.failHistory--
		s.failed++
		s.mu.Unlock()
		return 0, errors.New("review: i/o timeout")
	}
	s.mu.Unlock()
	return s.Store.Return(ctx, key, r)
}

// reviewStores: the in-memory store and the Redis one, each with a way to
// lose every window (a Redis restarted without persistence: FLUSHALL).
func reviewStores(t *testing.T) map[string]func() (Store, func()) {
	srv := redistest.Start(t)
	conn, err := redisconn.New(redisconn.Config{Addrs: []string{srv.Addr()}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return map[string]func() (Store, func()){
		"inmem": func() (Store, func()) {
			st := NewInmemStore()
			return st, st.Lose
		},
		"redis": func() (Store, func()) {
			rs := NewRedisStore(conn, "review")
			if err := rs.Load(context.Background()); err != nil {
				t.Fatal(err)
			}
			return rs, func() {
				if err := conn.Client().FlushAll(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
			}
		},
	}
}

// A store that lost its window, and one failed call: the node that found
// the new window must still tell it its history (Budget.history.owed). It
// once recorded the new generation first and, its report failed, never
// told it: after rebuildWait it leased a whole new limit on top of what it
// admitted in the last window (504 in a window, limit 300).
func TestLostHistoryAfterOneFailedReport(t *testing.T) {
	const window = 3 * time.Second
	for name, mk := range reviewStores(t) {
		t.Run(name, func(t *testing.T) {
			inner, lose := mk()
			st := &reviewStore{Store: inner}
			lim := limiter.Limits{Requests: 300}
			s := newSim(t, st, 1, Config{Key: "lost-report-" + name, Limits: lim, Window: window})
			rng := rand.New(rand.NewPCG(7, 8))
			tokens := func() int64 { return 100 }
			shares := []float64{1}
			s.run(window/2, 1200, shares, rng, tokens)
			lostAt := s.now
			lose()
			st.mu.Lock()
			st.failHistory = 1 // one call times out: the report
			st.mu.Unlock()
			s.run(2*window, 1200, shares, rng, tokens)
			maxReq, _, _, _ := s.audit(s.now)
			var before, after int
			for _, a := range s.got {
				if a.at < lostAt {
					before++
				} else if a.at < lostAt+int64(window)/2 {
					after++
				}
			}
			t.Logf("%d admitted in the half window before the loss, %d in the half window after; fullest window %d of %d (failed reports %d, rebuilt %d)",
				before, after, maxReq, lim.Requests, st.failed, s.nodes[0].b.Stats(s.now).Rebuilt)
			if maxReq > lim.Requests {
				t.Errorf("a window held %d requests, limit %d", maxReq, lim.Requests)
			}
		})
	}
}

// A store that lost its window: a node that never used the budget's
// window (just started, or new to this upstream or model) has no
// generation to compare, leases at once, before the busy node has told
// the new window what it used.
func TestKnownLimitNewNodeLeasesBeforeHistoryIsTold(t *testing.T) {
	knownlimit.Only(t)
	const window = 3 * time.Second
	for name, mk := range reviewStores(t) {
		t.Run(name, func(t *testing.T) {
			st, lose := mk()
			lim := limiter.Limits{Requests: 300}
			s := newSim(t, st, 2, Config{Key: "new-node-" + name, Limits: lim, Window: window})
			rng := rand.New(rand.NewPCG(7, 8))
			tokens := func() int64 { return 100 }
			// Node 0 busy, node 1 idle (no request for this budget yet).
			s.run(window/2, 1200, []float64{1, 0}, rng, tokens)
			lose()
			// Node 1's first requests come right after the loss, before
			// node 0's next store call (within its genProbe, or its
			// breaker's 500 ms after a restart).
			c := s.nodes[1]
			for range 100 {
				c.b.Take(s.now, 100) // refused: no block yet; counted as demand
			}
			c.l.Maintain(context.Background())
			t.Logf("new node's grant: %+v", c.b.Stats(s.now).Left)
			var fromNew int
			for {
				tk, d := c.b.Take(s.now, 100)
				if !d.Allowed {
					break
				}
				c.b.Finish(s.now, &tk, 100)
				s.got = append(s.got, admission{s.now, 100})
				fromNew++
			}
			s.run(2*window, 1200, []float64{1, 0}, rng, tokens)
			maxReq, _, _, _ := s.audit(s.now)
			t.Logf("new node admitted %d right after the loss; fullest window %d of %d (node 0 rebuilt %d)",
				fromNew, maxReq, lim.Requests, s.nodes[0].b.Stats(s.now).Rebuilt)
			if maxReq > lim.Requests {
				t.Errorf("a window held %d requests, limit %d", maxReq, lim.Requests)
			}
		})
	}
}

// A store that lost its slots: a node's holding for calls still running
// is known only to it until its next renewal (up to a third of the slot
// TTL later); another node asking meanwhile is granted the whole limit.
func TestKnownLimitSlotsAfterLoss(t *testing.T) {
	knownlimit.Only(t)
	const window = 3 * time.Second
	for name, mk := range reviewStores(t) {
		t.Run(name, func(t *testing.T) {
			st, lose := mk()
			lim := limiter.Limits{Concurrency: 10}
			s := newSim(t, st, 2, Config{Key: "slots-" + name, Limits: lim, Window: window})
			ctx := context.Background()
			fill := func(n simNode) int {
				got := 0
				for range 50 {
					if _, d := n.b.Take(s.now, 0); d.Allowed {
						got++ // the call runs on (never finished here)
						continue
					}
					n.l.Maintain(ctx)
					s.now += int64(time.Millisecond)
				}
				return got
			}
			a := fill(s.nodes[0])
			lose()
			s.now += int64(100 * time.Millisecond)
			c := fill(s.nodes[1])
			t.Logf("in flight at once: %d on node 0 + %d on node 1 = %d, limit %d", a, c, a+c, lim.Concurrency)
			if a+c > int(lim.Concurrency) {
				t.Errorf("%d calls in flight, limit %d", a+c, lim.Concurrency)
			}
		})
	}
}
