// Package hangup tells when a client hangs up while its call waits for an
// upstream's answer headers.
//
// An LLM provider can think for many seconds before its first byte, and a
// client that hangs up meanwhile is invisible to fasthttp: nothing reads
// the client connection while the handler runs, and RequestCtx.Done() fires
// only at server shutdown. So a Watch peeks at the client's socket without
// blocking (keepalive.PeerGone: recv MSG_PEEK|MSG_DONTWAIT, ~1 µs) every
// Check, from one goroutine per List that ticks while calls wait: no
// goroutine or timer per request, so a call answered between two ticks
// costs two short lock holds and no syscall. End of stream, a reset or a
// connection closed here mean the client is gone. Bytes queued are the
// client's next, pipelined, request: it is there.
//
// Like nginx (proxy_ignore_client_abort off), a client that half-closes
// its side after sending the request is taken to be gone: a peek cannot
// tell the FIN of shutdown(SHUT_WR) from that of close.
//
// The package owns the peeking and the ticking goroutine. It knows nothing
// of calls, limits or answers: what a gone client means is the function a
// Watch is made with.
package hangup

import (
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ringgate/ringgate/keepalive"
)

// Check is the interval between peeks (the first comes within one).
const Check = 50 * time.Millisecond

// Watch watches one call's client connection while the handler waits for
// the upstream. mu orders a peek and its verdict against Stop: no peek runs
// after Stop returns (the server may read, close or reuse the connection
// once the handler is done).
type Watch struct {
	// onGone(arg) runs once, when the client is found gone: a function
	// and its argument, not a closure, so that a watch made for every
	// request allocates nothing more.
	onGone func(any)
	arg    any
	conn   syscall.Conn
	clk    clockwork.Clock // its List's, set with start when it is watched
	start  time.Time

	list *shard // where it is listed (set by add, cleared by Stop under mu); nil: not listed
	idx  int    // its place in list.ws, under list.mu

	mu      sync.Mutex
	raw     syscall.RawConn // from conn at the first tick
	stopped bool
	gone    time.Duration // > 0: the client was found gone this long after start
	// fired is closed once onGone is done (made, under mu, when gone is
	// set).
	fired chan struct{}
}

// New makes a watch that runs onGone(arg) once if its client hangs up
// before Stop. It watches nothing until List.Watch, which times it on the
// List's clock from then; until then it is on the wall clock.
func New(onGone func(any), arg any) *Watch {
	return &Watch{onGone: onGone, arg: arg, clk: wallClock, start: wallClock.Now()}
}

// Cancel is the client found gone by other means (a hop's edge says its own
// client hung up): onGone runs now, unless the watch was stopped.
func (w *Watch) Cancel() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.markGone()
	w.mu.Unlock()
	w.fire()
}

// markGone records the client gone; w.mu is held.
func (w *Watch) markGone() {
	w.gone = max(w.clk.Since(w.start), 1)
	w.stopped = true
	w.fired = make(chan struct{})
}

func (w *Watch) fire() {
	defer close(w.fired)
	w.onGone(w.arg)
}

// WasGone reports whether the watch found its client gone (or was
// cancelled); after Stop, what it says no longer changes.
func (w *Watch) WasGone() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gone > 0
}

// Gone is how long after the watch began its client was found gone (0:
// not gone), and how long it has watched.
func (w *Watch) Gone() (after, watched time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gone, w.clk.Since(w.start)
}

// WaitFired waits until onGone is done; only after Stop reported the
// client gone.
func (w *Watch) WaitFired() {
	w.mu.Lock()
	fired := w.fired
	w.mu.Unlock()
	if fired != nil {
		<-fired
	}
}

// check is one tick: peek, and run onGone if the client is gone.
func (w *Watch) check() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	if w.raw == nil {
		raw, err := w.conn.SyscallConn()
		if err != nil {
			w.stopped = true // nothing to peek at: no watch
			w.mu.Unlock()
			return
		}
		w.raw = raw
	}
	if err := keepalive.PeerGone(w.raw); err == nil || err == keepalive.ErrUnasked {
		w.mu.Unlock()
		return
	}
	w.markGone()
	w.mu.Unlock()
	// Not on the ticking goroutine: onGone can take long (a call's
	// prompt counted exactly, a report to a new owner), and every other
	// call's peek would wait for it.
	go w.fire()
}

// Stop ends the watch when the handler's wait returns. It reports whether
// the client was found gone, onGone then being done or under way.
func (w *Watch) Stop() bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	w.stopped = true
	gone := w.gone > 0
	list := w.list
	w.list = nil // a second Stop removes nothing
	w.mu.Unlock()
	if list != nil {
		list.remove(w)
	}
	return gone
}

// List holds the watches of calls waiting for their upstream. One goroutine
// ticks every Check while any is listed (it starts with the first and ends
// at a tick that finds none) and peeks for each listed at the tick: the
// cost is per tick, not per call (at 20 000 calls/s of 50 µs, one or two
// are in flight at a tick). A timer per call would cost more than the rest
// of the watch (its heap insert and delete, on every request). Shards keep
// concurrent calls off one lock, and a call finds the goroutine running
// without taking any other.
type List struct {
	// Clock times the watches and ticks the peeks; nil is the wall clock.
	// Set it before the first Watch.
	Clock clockwork.Clock

	shards [shards]shard
	// running: the ticking goroutine is on. add lists a watch, then
	// starts the goroutine if it is off; tick turns it off, then looks
	// again: a watch listed meanwhile is seen by one or the other.
	running atomic.Bool
}

const shards = 16

var wallClock = clockwork.NewRealClock()

func (l *List) clock() clockwork.Clock {
	if l.Clock != nil {
		return l.Clock
	}
	return wallClock
}

// peeksPerGoroutine is how many watches one goroutine peeks at in a tick
// (a peek is 1–3 µs).
const peeksPerGoroutine = 1024

type shard struct {
	mu sync.Mutex
	ws []*Watch
	_  [32]byte // 64 bytes: a cache line each
}

// Watch lists w for the ticking goroutine's peeks when conn has a socket
// to peek at; on one that has not (TLS, a wrapped listener's) or a
// platform without a non-blocking peek, w watches nothing, but Cancel
// still works. It returns w.
func (l *List) Watch(conn net.Conn, w *Watch) *Watch {
	if l.Clock != nil {
		// New read the wall clock; a List on another clock times it anew
		// (on the wall clock, one read a call is enough).
		w.clk, w.start = l.Clock, l.Clock.Now()
	}
	sc, ok := conn.(syscall.Conn)
	if !keepalive.CanPeek || !ok {
		return w
	}
	w.conn = sc
	l.add(w)
	return w
}

func (l *List) add(w *Watch) {
	s := &l.shards[rand.Uint32()%shards]
	s.mu.Lock()
	w.list, w.idx = s, len(s.ws)
	s.ws = append(s.ws, w)
	s.mu.Unlock()
	if !l.running.Load() && l.running.CompareAndSwap(false, true) {
		go l.tick()
	}
}

func (s *shard) remove(w *Watch) {
	s.mu.Lock()
	last := len(s.ws) - 1
	moved := s.ws[last]
	s.ws[w.idx], moved.idx = moved, w.idx
	s.ws[last] = nil
	s.ws = s.ws[:last]
	s.mu.Unlock()
}

// tick peeks, every Check, for the calls listed; it returns at a tick that
// finds none.
func (l *List) tick() {
	t := l.clock().NewTicker(Check)
	defer t.Stop()
	var due []*Watch
	for range t.Chan() {
		due = due[:0]
		for i := range l.shards {
			s := &l.shards[i]
			s.mu.Lock()
			due = append(due, s.ws...)
			s.mu.Unlock()
		}
		checkAll(due)
		listed := len(due)
		clear(due)
		if listed == 0 {
			l.running.Store(false)
			// A watch listed before the Store found the goroutine on
			// and started none: look again, and carry on for it unless
			// its add started another since.
			if l.empty() || !l.running.CompareAndSwap(false, true) {
				return
			}
		}
	}
}

// checkAll peeks for every watch due. Many calls waiting (LLM calls last
// seconds: a busy node has tens of thousands in flight) are peeked on
// every core, so that one pass still fits in a tick.
func checkAll(due []*Watch) {
	if len(due) <= peeksPerGoroutine {
		for _, w := range due {
			w.check()
		}
		return
	}
	var wg sync.WaitGroup
	for part := range slices.Chunk(due, peeksPerGoroutine) {
		wg.Go(func() {
			for _, w := range part {
				w.check()
			}
		})
	}
	wg.Wait()
}

func (l *List) empty() bool {
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n := len(s.ws)
		s.mu.Unlock()
		if n > 0 {
			return false
		}
	}
	return true
}
