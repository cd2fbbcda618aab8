package lease

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"
)

// Span is the number of buckets in a window, in the store and in a node's
// accounting of its blocks.
const Span = 128

// Amount is a number of requests and tokens.
type Amount struct{ Requests, Tokens int64 }

// Use is what was used of a block within one bucket.
type Use struct {
	Bucket int64
	Amount
}

// GrantRequest asks a store for a block of a budget. Buckets are indexes of
// window/Span wide intervals of the nodes' clock.
type GrantRequest struct {
	Now     int64  // the bucket of now
	Expires int64  // the bucket the block is charged at: its expiry's
	Limit   Amount // the budget's limits per window; 0: none on that dimension
	Want    Amount // what the node would like; 0 on a dimension it does not lease
	// Min is the least worth granting on each dimension: less than one
	// request's worth of tokens is a fragment nobody can use, taken from
	// the node that could.
	Min    Amount
	KeyTTL time.Duration
	// Fence closes the window to grants, this one and every later one:
	// what it holds then (blocks outstanding counted whole) is all it
	// will ever hold beyond what is given back (a spill's end).
	Fence bool
}

// GrantReply is what a store granted, and what its window holds after it.
type GrantReply struct {
	Granted Amount
	Used    Amount
	// Oldest is the oldest bucket still counted: room frees when it
	// leaves the window, at bucket Oldest+Span+1.
	Oldest int64
	// Gen names the window: a new one means the store made it anew
	// (first use, an idle spell, or a Redis that lost its data).
	Gen int64
	// Fenced: the window grants nothing any more (GrantRequest.Fence).
	Fenced bool
}

// ReturnRequest gives a block back: Granted comes off bucket Expires, the
// Used are charged where they were used. A report of what was admitted
// without a block (a share during an outage) has no Granted.
type ReturnRequest struct {
	// Gen is the generation of the window the block was granted in: its
	// grant comes off only that window (one made anew never held it).
	Gen     int64
	Now     int64
	Expires int64
	Granted Amount
	Used    []Use
	KeyTTL  time.Duration
}

// Store holds the budgets' windows and slots for the whole cluster.
type Store interface {
	Grant(ctx context.Context, key string, g GrantRequest) (GrantReply, error)
	// Return gives a block back and reports the window's generation.
	Return(ctx context.Context, key string, r ReturnRequest) (gen int64, err error)
	// HoldSlots sets the slots node holds for key to want, or to what the
	// limit leaves beside the other nodes' live holdings, and reports
	// what it holds now; a holding lapses ttl after now (nodes' clock,
	// Unix ns) unless held again.
	HoldSlots(ctx context.Context, key, node string, want, limit, now int64, ttl time.Duration) (int64, error)
	// Demand sets node's demand report for key, which lapses ttl after
	// now (nodes' clock, Unix ns) unless set again, and returns every
	// live report by node, this one's included.
	Demand(ctx context.Context, key, node string, report []byte, now int64, ttl time.Duration) (map[string][]byte, error)
}

// ErrStoreDown is what InmemStore answers while Down.
var ErrStoreDown = errors.New("lease store down")

// InmemStore is a Store in memory, with the semantics of the Redis one
// (the tests of this package run the same checks on both), for unit tests
// of protocols that lease. Down makes it fail every call.
type InmemStore struct {
	mu    sync.Mutex
	down  bool
	wins  map[string]*inmemWindow
	slots map[string]map[string]inmemHold
	wants map[string]map[string]inmemReport
	gens  int64
	Calls int // calls answered, for tests to count round trips
}

type inmemWindow struct {
	gen    int64
	lo, hi int64
	sum    Amount
	b      map[int64]Amount
	fenced bool
}

type inmemHold struct{ held, until int64 }

type inmemReport struct {
	report []byte
	until  int64
}

// NewInmemStore returns an empty store.
func NewInmemStore() *InmemStore {
	return &InmemStore{wins: make(map[string]*inmemWindow), slots: make(map[string]map[string]inmemHold),
		wants: make(map[string]map[string]inmemReport)}
}

// Down makes every call fail with ErrStoreDown (true) or work again.
func (s *InmemStore) Down(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

// window advances key's window to now and returns it, and whether it was
// made anew; s.mu is held.
func (s *InmemStore) window(key string, now int64) (*inmemWindow, bool) {
	cut := now - Span - 1 // buckets <= cut are out of the window
	w := s.wins[key]
	if w == nil {
		s.gens++
		w = &inmemWindow{gen: s.gens, lo: cut + 1, hi: cut, b: make(map[int64]Amount)}
		s.wins[key] = w
		return w, true
	}
	if w.hi <= cut { // everything left: the same window, emptied at once
		*w = inmemWindow{gen: w.gen, lo: cut + 1, hi: cut, b: make(map[int64]Amount), fenced: w.fenced}
		return w, false
	}
	for ; w.lo <= cut; w.lo++ {
		a := w.b[w.lo]
		w.sum.Requests -= a.Requests
		w.sum.Tokens -= a.Tokens
		delete(w.b, w.lo)
	}
	return w, false
}

func (w *inmemWindow) add(b int64, a Amount) {
	if b < w.lo {
		return // out of the window already
	}
	c := w.b[b]
	c.Requests += a.Requests
	c.Tokens += a.Tokens
	w.b[b] = c
	w.sum.Requests += a.Requests
	w.sum.Tokens += a.Tokens
	w.hi = max(w.hi, b)
}

func grantOf(limit, want, least, used int64) int64 {
	if limit <= 0 {
		return 0 // not leased: the node does not count it
	}
	g := max(0, min(want, limit-used))
	if g < least {
		return 0
	}
	return g
}

func (s *InmemStore) Grant(_ context.Context, key string, g GrantRequest) (GrantReply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return GrantReply{}, ErrStoreDown
	}
	s.Calls++
	w, _ := s.window(key, g.Now)
	w.fenced = w.fenced || g.Fence
	var got Amount
	if !w.fenced {
		got = Amount{Requests: grantOf(g.Limit.Requests, g.Want.Requests, g.Min.Requests, w.sum.Requests),
			Tokens: grantOf(g.Limit.Tokens, g.Want.Tokens, g.Min.Tokens, w.sum.Tokens)}
	}
	if got.Requests > 0 || got.Tokens > 0 {
		w.add(g.Expires, got)
	}
	return GrantReply{Granted: got, Used: w.sum, Oldest: w.lo, Gen: w.gen, Fenced: w.fenced}, nil
}

func (s *InmemStore) Return(_ context.Context, key string, r ReturnRequest) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return 0, ErrStoreDown
	}
	s.Calls++
	w, _ := s.window(key, r.Now)
	if r.Gen == w.gen { // another window never held the grant
		w.add(r.Expires, Amount{Requests: -r.Granted.Requests, Tokens: -r.Granted.Tokens})
	}
	for _, u := range r.Used {
		w.add(u.Bucket, u.Amount)
	}
	return w.gen, nil
}

// Lose forgets every window and holding, as a Redis restarted without
// persistence does.
func (s *InmemStore) Lose() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wins = make(map[string]*inmemWindow)
	s.slots = make(map[string]map[string]inmemHold)
	s.wants = make(map[string]map[string]inmemReport)
}

func (s *InmemStore) HoldSlots(_ context.Context, key, node string, want, limit, now int64, ttl time.Duration) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return 0, ErrStoreDown
	}
	s.Calls++
	hs := s.slots[key]
	if hs == nil {
		hs = make(map[string]inmemHold)
		s.slots[key] = hs
	}
	var others int64
	for n, h := range hs {
		switch {
		case h.until <= now:
			delete(hs, n)
		case n != node:
			others += h.held
		}
	}
	held := max(0, min(want, limit-others))
	hs[node] = inmemHold{held: held, until: now + int64(ttl)}
	return held, nil
}

func (s *InmemStore) Demand(_ context.Context, key, node string, report []byte, now int64, ttl time.Duration) (map[string][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return nil, ErrStoreDown
	}
	s.Calls++
	rs := s.wants[key]
	if rs == nil {
		rs = make(map[string]inmemReport)
		s.wants[key] = rs
	}
	rs[node] = inmemReport{report: bytes.Clone(report), until: now + int64(ttl)}
	out := make(map[string][]byte, len(rs))
	for n, r := range rs {
		if r.until <= now {
			delete(rs, n)
			continue
		}
		out[n] = bytes.Clone(r.report)
	}
	return out, nil
}
