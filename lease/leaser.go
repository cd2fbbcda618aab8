package lease

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Leaser does the store work of a node's budgets in the background: one
// goroutine that gives back expired blocks, takes new ones as demand
// needs them and renews slots, on a short tick or at once when a Take
// found no room. No store call is ever made on a request's path.
type Leaser struct {
	store Store // nil: no store (no Redis): every budget on its share
	node  string
	clock func() int64
	log   *slog.Logger
	tick  time.Duration
	born  int64 // when it was made: the process's start

	mu      sync.Mutex
	budgets map[string]*Budget
	// retiring are budgets no longer taken from whose calls still run:
	// kept (their slots held) until the last one ends.
	retiring map[string]*Budget
	wake     chan struct{}
}

// LeaserConfig configures a Leaser.
type LeaserConfig struct {
	Store Store // nil: no store
	Node  string
	Clock func() int64 // Unix ns; default time.Now
	// Tick is how often every budget is looked at; default 10 ms.
	Tick   time.Duration
	Logger *slog.Logger
}

// NewLeaser makes a Leaser; Run starts its work.
func NewLeaser(c LeaserConfig) *Leaser {
	if c.Clock == nil {
		c.Clock = func() int64 { return time.Now().UnixNano() }
	}
	if c.Tick <= 0 {
		c.Tick = 10 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &Leaser{store: c.Store, node: c.Node, clock: c.Clock, log: c.Logger, tick: c.Tick, born: c.Clock(),
		budgets: make(map[string]*Budget), retiring: make(map[string]*Budget), wake: make(chan struct{}, 1)}
}

// Budget returns the node's budget for cfg.Key, made on first use; a
// budget asked for again with other limits (a reload) keeps its blocks
// and takes the new limits.
func (l *Leaser) Budget(cfg Config, members func() int) *Budget {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.retiring[cfg.Key]; b != nil && l.budgets[cfg.Key] == nil {
		// Asked for again while calls taken from it still run (a spill
		// rejoined): taken back, so that one budget holds the node's
		// slots for the key in the store. Beside a fresh one, each
		// would write its own count over the other's: 7 calls at once
		// for 4.
		delete(l.retiring, cfg.Key)
		b.mu.Lock()
		b.retired = false
		b.mu.Unlock()
		l.budgets[cfg.Key] = b
	}
	if b := l.budgets[cfg.Key]; b != nil {
		if b.cfg.Window == cfg.Window && (cfg.LeaseFor == 0 || cfg.LeaseFor == b.cfg.LeaseFor) {
			b.SetLimits(cfg.Limits, cfg.OnStoreDown)
			return b
		}
	}
	b := NewBudget(cfg, members)
	b.storeless, b.born = l.store == nil, l.born
	if b.storeless {
		// On its share from the first request, not from the first round
		// of the loop (a request before it found no slot at all).
		b.outage.since = l.clock()
		b.outage.down.Store(true)
		b.outage.none.Store(true)
	}
	b.wake = l.kick
	if old := l.budgets[cfg.Key]; old != nil {
		// Another window (a reload): a budget on the new buckets, which
		// carries the old one's calls in flight and takes what is asked
		// of the old one (made whole first: it is reached through it at
		// once); the old one's blocks go back.
		old.replaceBy(b)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = old.giveBack(ctx, l.store, l.node, l.clock())
		}()
	}
	l.budgets[cfg.Key] = b
	return b
}

// Retain drops the budgets whose keys are not in keep (a reload removed
// them); their blocks are given back in the background.
func (l *Leaser) Retain(keep map[string]bool) {
	l.mu.Lock()
	var gone []*Budget
	for k, b := range l.budgets {
		if !keep[k] {
			gone = append(gone, b)
			delete(l.budgets, k)
		}
	}
	l.mu.Unlock()
	if len(gone) == 0 {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		for _, b := range gone {
			_ = b.giveBack(ctx, l.store, l.node, l.clock())
		}
	}()
}

// Drop gives back the budget for key and forgets it.
func (l *Leaser) Drop(key string) {
	l.mu.Lock()
	b := l.budgets[key]
	delete(l.budgets, key)
	l.mu.Unlock()
	if b == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = b.giveBack(ctx, l.store, l.node, l.clock())
	}()
}

// Retire gives back the budget for key once no call taken from it runs any
// more, and forgets it; until then its slots stay held in the store, so
// other nodes do not take the slots of calls still running here.
func (l *Leaser) Retire(key string) {
	l.mu.Lock()
	if b := l.budgets[key]; b != nil {
		delete(l.budgets, key)
		l.retiring[key] = b
		b.mu.Lock()
		b.retired = true
		b.mu.Unlock()
	}
	l.mu.Unlock()
	l.kick()
}

// HasStore reports whether budgets are shared through a store (without
// one, every budget is this node's share).
func (l *Leaser) HasStore() bool { return l.store != nil }

// Fence closes b's window in the store to grants, for every node: no block
// is granted on it any more, so what it holds now — every node's uses, and
// its blocks outstanding counted whole — bounds all that can still be
// admitted on it. It reports that.
//
// The fence lasts at least keep, however short the window.
func (l *Leaser) Fence(ctx context.Context, b *Budget, keep time.Duration) (Amount, error) {
	if l.store == nil {
		return Amount{}, ErrStoreDown
	}
	return b.fence(ctx, l.store, l.clock(), keep)
}

func (l *Leaser) kick() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *Leaser) all() []*Budget {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*Budget, 0, len(l.budgets)+len(l.retiring))
	for _, b := range l.budgets {
		out = append(out, b)
	}
	for k, b := range l.retiring {
		b.mu.Lock()
		idle := b.slots.used-b.slots.carried <= 0
		b.mu.Unlock()
		if idle {
			delete(l.retiring, k)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_ = b.giveBack(ctx, l.store, l.node, l.clock())
			}()
			continue
		}
		out = append(out, b)
	}
	return out
}

// Run works until ctx ends.
func (l *Leaser) Run(ctx context.Context) {
	t := time.NewTicker(l.tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.wake:
		}
		l.Maintain(ctx)
	}
}

// Maintain does one round of store work for every budget (Run calls it;
// tests may call it instead of running the loop).
func (l *Leaser) Maintain(ctx context.Context) {
	for _, b := range l.all() {
		b.mu.Lock()
		wasDown, since := b.outage.since != 0 && !b.storeless, b.outage.since
		b.mu.Unlock()
		b.maintain(ctx, l.store, l.node, l.clock())
		b.mu.Lock()
		isDown := b.outage.since != 0 && !b.storeless
		b.mu.Unlock()
		switch {
		case !wasDown && isDown:
			l.log.Warn("lease", "phase", "store_down", "budget", b.cfg.Key, "on_redis_down", b.cfg.OnStoreDown.String())
		case wasDown && !isDown:
			l.log.Info("lease", "phase", "store_back", "budget", b.cfg.Key, "degraded_ms", (l.clock()-since)/int64(time.Millisecond))
		}
	}
}

// GiveBack returns every block and slot (a drain).
func (l *Leaser) GiveBack(ctx context.Context) error {
	var first error
	for _, b := range l.all() {
		if err := b.giveBack(ctx, l.store, l.node, l.clock()); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Stats reports every budget's state, by key.
func (l *Leaser) Stats() map[string]Stats {
	now := l.clock()
	out := make(map[string]Stats)
	for _, b := range l.all() {
		out[b.cfg.Key] = b.Stats(now)
	}
	return out
}

func (o OnStoreDown) String() string {
	switch o {
	case Open:
		return "open"
	case Closed:
		return "closed"
	}
	return "share"
}
