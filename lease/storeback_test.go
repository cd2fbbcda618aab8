package lease

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/limiter"
)

// cutStore is one node's view of a shared store, cut off while cuts says
// so: each node has its own connection (its own breaker), so a node may
// find Redis back before another does.
type cutStore struct {
	Store
	node string // the node this view belongs to
	reg  *cuts
}

type cuts struct {
	mu   sync.Mutex
	down map[string]bool
}

func (r *cuts) set(node string, d bool) {
	r.mu.Lock()
	r.down[node] = d
	r.mu.Unlock()
}

func (s *cutStore) isDown() bool {
	s.reg.mu.Lock()
	defer s.reg.mu.Unlock()
	return s.reg.down[s.node]
}

func (s *cutStore) Grant(ctx context.Context, key string, g GrantRequest) (GrantReply, error) {
	if s.isDown() {
		return GrantReply{}, ErrStoreDown
	}
	return s.Store.Grant(ctx, key, g)
}

func (s *cutStore) Return(ctx context.Context, key string, r ReturnRequest) (int64, error) {
	if s.isDown() {
		return 0, ErrStoreDown
	}
	return s.Store.Return(ctx, key, r)
}

func (s *cutStore) HoldSlots(ctx context.Context, key, node string, want, limit, now int64, ttl time.Duration) (int64, error) {
	if s.isDown() {
		return 0, ErrStoreDown
	}
	return s.Store.HoldSlots(ctx, key, node, want, limit, now, ttl)
}

// TestStoreBackWaitsForOthersShares (a reviewer's): Redis goes away for
// every node. During the outage node B serves the
// budget on its strict share (limit/2); node A has no demand for it (its
// tenants idle) and so never makes a share. Redis comes back: A's
// connection finds it first, B's breaker is still open for a few hundred
// ms (each node has its own). A's demand rises at once. A node back waits
// rebuildWait before a grant, so that the shares' uses reach the store
// first; A, which had no share, did not: it leased on a window that did
// not hold what B admitted on its share, 450 requests in a window for 300.
func TestStoreBackWaitsForOthersShares(t *testing.T) {
	const window = 3 * time.Second
	for stName, inner := range stores(t) {
		t.Run(stName, func(t *testing.T) {
			reg := &cuts{down: map[string]bool{}}
			lim := limiter.Limits{Requests: 300}
			cfg := Config{Key: "storeback-" + stName, Limits: lim, Window: window}
			now := int64(1000 * time.Hour)
			names := []string{"A", "B"}
			var ls []*Leaser
			var bs []*Budget
			for _, n := range names {
				st := &cutStore{Store: inner, node: n, reg: reg}
				l := NewLeaser(LeaserConfig{Store: st, Node: n, Clock: func() int64 { return now }})
				ls = append(ls, l)
				bs = append(bs, l.Budget(cfg, func() int { return 2 }))
			}
			var got []admission
			step := int64(time.Millisecond)
			// run: rate per window to each node.
			run := func(dur time.Duration, rates [2]int) {
				end := now + int64(dur)
				var carry [2]float64
				for ; now < end; now += step {
					for i := range ls {
						if (now/step+int64(3*i))%10 == 0 {
							ls[i].Maintain(context.Background())
						}
					}
					for i := range bs {
						carry[i] += float64(rates[i]) * float64(step) / float64(window)
						for ; carry[i] >= 1; carry[i]-- {
							tk, d := bs[i].Take(now, 100)
							if d.Allowed {
								got = append(got, admission{now, 100})
								bs[i].Finish(now, &tk, 100)
							}
						}
					}
				}
			}
			// Both busy for two windows.
			run(2*window, [2]int{300, 300})
			// Redis goes away for everyone; only B has demand.
			reg.set("A", true)
			reg.set("B", true)
			downAt := now
			run(3*window, [2]int{0, 600})
			// Redis is back for A; B's breaker keeps it away 400 ms more.
			reg.set("A", false)
			backAt := now
			run(awayLonger, [2]int{3000, 0})
			reg.set("B", false)
			run(2*window, [2]int{3000, 0})

			s := &sim{window: window, got: got, now: now}
			maxReq, _, _, _ := s.audit(now)
			var shareB, aAfter int
			for _, a := range got {
				if a.at >= downAt && a.at < backAt {
					shareB++
				}
			}
			for _, a := range got {
				if a.at >= backAt && a.at < backAt+int64(window) {
					aAfter++
				}
			}
			t.Logf("B admitted %d while Redis was down (its last blocks, then its share); A admitted %d in the window after Redis came back; fullest window %d of %d",
				shareB, aAfter, maxReq, lim.Requests)
			if maxReq > lim.Requests {
				t.Errorf("a window held %d requests, limit %d", maxReq, lim.Requests)
			}
		})
	}
}

const awayLonger = 400 * time.Millisecond
