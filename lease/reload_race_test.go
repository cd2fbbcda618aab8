package lease

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringgate/ringgate/limiter"
)

// Calls taken on budgets that reloads of limits.window replace
// while they run, ending by Finish or Cancel concurrently with the reloads
// (a window toggled back and forth, so a reload goes back to an old width):
// once every call ended, the budget in force counts no slot and no carried
// call, and admits its whole concurrency again. Run with -race.
func TestReloadsRacingCallsFreeEverySlot(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var at atomic.Int64
			at.Store(int64(1000 * time.Hour))
			l := NewLeaser(LeaserConfig{Store: st, Node: "a", Clock: at.Load})
			const limit = 6
			cfg := Config{Key: "reload-race-" + name, Limits: limiter.Limits{Concurrency: limit}, Window: 3 * time.Second}
			var mu sync.Mutex
			cur := l.Budget(cfg, nil)
			get := func() *Budget { mu.Lock(); defer mu.Unlock(); return cur }
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var taken, onReplaced atomic.Int64
			// Reloads: 3 s, 4 s, 3 s, 4 s...
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 200 {
					c := cfg
					c.Window = time.Duration(3+i%2) * time.Second
					mu.Lock()
					cur = l.Budget(c, nil)
					mu.Unlock()
					time.Sleep(400 * time.Microsecond)
				}
				close(stop)
			}()
			// The leaser's loop.
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					l.Maintain(ctx)
					at.Add(int64(time.Millisecond))
					time.Sleep(100 * time.Microsecond)
				}
			}()
			// Callers: take, hold a little, Finish or Cancel on the budget
			// they took from.
			for w := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						b := get()
						tk, d := b.Take(at.Load(), 1)
						if !d.Allowed {
							time.Sleep(50 * time.Microsecond)
							continue
						}
						time.Sleep(time.Duration((i+w)%3) * 300 * time.Microsecond)
						b.mu.Lock()
						if b.next != nil {
							onReplaced.Add(1)
						}
						b.mu.Unlock()
						taken.Add(1)
						if (i+w)%2 == 0 {
							b.Cancel(at.Load(), &tk)
						} else {
							b.Finish(at.Load(), &tk, 1)
						}
					}
				}()
			}
			wg.Wait()
			t.Logf("%d calls, %d of them ended on a budget replaced meanwhile", taken.Load(), onReplaced.Load())
			b := get()
			b.mu.Lock()
			used, carried := b.slots.used, b.slots.carried
			b.mu.Unlock()
			if used != 0 || carried != 0 {
				t.Fatalf("every call ended: the budget in force counts %d slots used, %d carried", used, carried)
			}
			n := 0
			var last Decision
			for range 200 {
				_, d := b.Take(at.Load(), 1)
				last = d
				if d.Allowed {
					n++
					if n == limit {
						break
					}
					continue
				}
				l.Maintain(ctx)
				at.Add(int64(time.Millisecond))
			}
			if n != limit {
				t.Errorf("%d admitted of a concurrency of %d once every call ended; last refusal %+v; stats %+v", n, limit, last, b.Stats(at.Load()))
			}
		})
	}
}

// A retired budget (a spill this node left, its calls still running:
// Leaser.Retire) asked for again (the node joins the same spill again:
// serveSpill after owner_unreachable) is taken back. A fresh budget made
// beside it held the node's slots in the store under the same field, each
// writing its own count over the other's: 7 calls at once for 4 (a
// reviewer's).
func TestRetiredBudgetAskedAgainIsTakenBack(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var at atomic.Int64
			at.Store(int64(1000 * time.Hour))
			const limit = 4
			cfg := Config{Key: "reload-retire-" + name, Limits: limiter.Limits{Concurrency: limit}, Window: 3 * time.Second}
			a := NewLeaser(LeaserConfig{Store: st, Node: "a", Clock: at.Load})
			other := NewLeaser(LeaserConfig{Store: st, Node: "b", Clock: at.Load})
			fill := func(ls []*Leaser, b *Budget, max int) []Ticket {
				var running []Ticket
				for range 60 {
					if len(running) == max {
						break
					}
					if tk, d := b.Take(at.Load(), 1); d.Allowed {
						running = append(running, tk)
						continue
					}
					for _, l := range ls {
						l.Maintain(ctx)
					}
					at.Add(int64(time.Millisecond))
				}
				return running
			}
			old := a.Budget(cfg, nil)
			before := fill([]*Leaser{a}, old, 3) // 3 streams
			a.Retire(cfg.Key)                    // left: its calls run on
			again := a.Budget(cfg, nil)          // joined again
			after := fill([]*Leaser{a, other}, again, limit)
			ob := other.Budget(cfg, nil)
			onOther := fill([]*Leaser{a, other}, ob, limit)
			total := len(before) + len(after) + len(onOther)
			t.Logf("%d calls before the retire, %d on the budget made again, %d on another node: %d for %d", len(before), len(after), len(onOther), total, limit)
			if total > limit {
				t.Errorf("%d calls in flight for a concurrency of %d", total, limit)
			}
		})
	}
}

// gateStore blocks the next Grant on key gated until released.
type gateStore struct {
	Store
	mu      sync.Mutex
	gated   string
	entered chan struct{}
	release chan struct{}
}

func (s *gateStore) Grant(ctx context.Context, key string, g GrantRequest) (GrantReply, error) {
	s.mu.Lock()
	hit := s.gated != "" && key == s.gated
	if hit {
		s.gated = ""
	}
	s.mu.Unlock()
	if hit {
		close(s.entered)
		<-s.release
	}
	return s.Store.Grant(ctx, key, g)
}

// The leaser's round in flight when a reload replaces a budget still
// maintains the old one (its snapshot, Leaser.all): a grant in flight then
// lands in the old budget after its give-back took its blocks. It goes
// back at once. Kept there, given back by nothing, its whole grant stayed
// charged in the old width's window: a reload back to that width within a
// window admitted 0 of 100 (a reviewer's).
func TestGrantToReplacedBudgetGoesBack(t *testing.T) {
	for name, inner := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var at atomic.Int64
			at.Store(int64(1000 * time.Hour))
			gs := &gateStore{Store: inner, entered: make(chan struct{}), release: make(chan struct{})}
			l := NewLeaser(LeaserConfig{Store: gs, Node: "a", Clock: at.Load})
			const limit = 100
			cfg := Config{Key: "reload-stale-" + name, Limits: limiter.Limits{Requests: limit}, Window: 3 * time.Second}
			a := l.Budget(cfg, nil)
			for range 80 { // demand, before any block
				a.Take(at.Load(), 1)
			}
			gs.mu.Lock()
			gs.gated = a.windowKey
			gs.mu.Unlock()
			done := make(chan struct{})
			go func() { l.Maintain(ctx); close(done) }() // the loop's round
			<-gs.entered
			cfg.Window = 4 * time.Second
			l.Budget(cfg, nil)                // reload: a's give-back runs
			time.Sleep(50 * time.Millisecond) // (it has nothing to give back yet)
			close(gs.release)
			<-done
			a.mu.Lock()
			leaked := len(a.blocks)
			a.mu.Unlock()
			at.Add(int64(100 * time.Millisecond))
			cfg.Window = 3 * time.Second
			c := l.Budget(cfg, nil) // reload back
			n := 0
			for range 300 {
				if tk, d := c.Take(at.Load(), 1); d.Allowed {
					c.Finish(at.Load(), &tk, 1)
					n++
					continue
				}
				l.Maintain(ctx)
				at.Add(int64(time.Millisecond))
			}
			t.Logf("the replaced budget holds %d block(s) granted after its give-back; back on the old width, %d admitted of %d in the following 300 ms", leaked, n, limit)
			if n < limit/2 {
				t.Errorf("a reload back to the old width admitted %d of %d in a window where nothing else was admitted", n, limit)
			}
		})
	}
}
