package router

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/keepalive"
	"github.com/ringgate/ringgate/upstream"
)

// A client that hangs up while its call waits for the upstream's answer
// headers (an LLM provider can think for many seconds before its first
// byte) is invisible to fasthttp: nothing reads the client connection while
// the handler runs, and RequestCtx.Done() fires only at server shutdown. So
// the tenant's slot and token reservation would stay taken until the
// upstream answered.
//
// While the handler waits in Do, a clientWatch peeks at the client's socket
// without blocking (keepalive.PeerGone: recv MSG_PEEK|MSG_DONTWAIT, ~1 µs) every
// hangupCheck, from one goroutine per node that ticks while calls wait
// (watchList): no goroutine or timer per request, so a call answered
// between two ticks costs two short lock holds and no syscall. End of
// stream, a reset or a connection closed here mean the client is gone: the
// call is finished at once (slot freed, tokens settled at the reservation:
// the provider may bill the prompt, and we cannot know yet), and when Do
// returns its answer is dropped unwritten (an unread stream closes the
// upstream connection, which cuts the generation). A JSON answer, read
// whole, was generated all the same: the call is settled again on its
// usage (settleLate). Bytes queued are the client's
// next, pipelined, request: it is there.
//
// Like nginx (proxy_ignore_client_abort off), a client that half-closes its
// side after sending the request is taken to be gone: a peek cannot tell
// the FIN of shutdown(SHUT_WR) from that of close.
//
// A hop is watched the same way on the owner: its client is the edge's
// pooled connection, which the edge closes when it gives up on the call
// (its read timeout, a crash). An edge's own client hanging up is not seen
// through the hop (the edge waits in its own Do): the edge watches its
// client too and, when it is gone, tells the owner (hopcancel.go).

// hangupCheck is the interval between peeks (the first comes within one).
const hangupCheck = 50 * time.Millisecond

// clientWatch watches one call's client connection while the handler waits
// for the upstream. mu orders a peek and its verdict against stop: no peek
// runs after stop returns (the server may read, close or reuse the
// connection once the handler is done).
type clientWatch struct {
	r      *Router
	onGone func() // run once, when the client is found gone; nil: finish call
	call   *call  // the call watchClient watches for (onGone nil)
	conn   syscall.Conn
	start  time.Time

	list *watchShard // where it is listed (set by add, cleared by stop under mu); nil: not listed
	idx  int         // its place in list.ws, under list.mu

	mu      sync.Mutex
	raw     syscall.RawConn // from conn at the first tick
	stopped bool
	gone    time.Duration // > 0: the client was found gone this long after start
	// fired is closed once what the watch does for a gone client is done
	// (made, under mu, when gone is set): the handler settles the call
	// again on the answer that came after only then (settleLate).
	fired chan struct{}
}

// watchClient starts watching ctx's connection for c (c.watch); on a
// connection with no socket to peek at (TLS, a wrapped listener's) or a
// platform without a non-blocking peek, the watch watches nothing.
func (r *Router) watchClient(ctx *fasthttp.RequestCtx, c *call) *clientWatch {
	c.watch = &clientWatch{r: r, call: c, start: time.Now()}
	return r.listWatch(ctx, c.watch)
}

// callGone finishes a call whose client is gone: settled at its
// reservation, the prompt counted exactly.
func (r *Router) callGone(c *call) {
	r.metrics.clientGone.Inc()
	// The provider runs the call on until it answers: its budgets keep
	// the slot (freed now, a concurrency of 1 could run 2 calls at once)
	// until the handler hears the answer (clientGone). A
	// hop's cancel runs this too, while its handler waits in Do.
	c.providerHeld = c.nBudgets > 0 || c.spill.b != nil
	r.finish(c, upstream.Usage{Prompt: r.exactPrompt(c), Completion: c.res.Total - c.res.Prompt, Reported: true}, false, 0)
}

// watch watches ctx's connection and runs onGone once if the client hangs
// up before stop. Without a socket to peek at it watches nothing, but
// cancel still works (a hop's edge says its client is gone).
func (r *Router) watch(ctx *fasthttp.RequestCtx, onGone func()) *clientWatch {
	return r.listWatch(ctx, &clientWatch{r: r, onGone: onGone, start: time.Now()})
}

// listWatch lists w for the ticking goroutine's peeks when ctx's
// connection has a socket to peek at.
func (r *Router) listWatch(ctx *fasthttp.RequestCtx, w *clientWatch) *clientWatch {
	sc, ok := ctx.Conn().(syscall.Conn)
	if !keepalive.CanPeek || !ok {
		return w
	}
	w.conn = sc
	r.watches.add(w)
	return w
}

// cancel is the client found gone by other means: the edge of a hop says
// its own client hung up (hopcancel.go).
func (w *clientWatch) cancel() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.gone = max(time.Since(w.start), 1)
	w.stopped = true
	w.fired = make(chan struct{})
	w.mu.Unlock()
	w.fire()
}

// fire runs what the watch does once its client is gone.
func (w *clientWatch) fire() {
	defer close(w.fired)
	if w.onGone == nil {
		w.r.callGone(w.call)
		return
	}
	w.onGone()
}

// wasGone reports whether the watch found its client gone (or was
// cancelled); after stop, what it says no longer changes.
func (w *clientWatch) wasGone() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gone > 0
}

// waitFired waits until what the watch did for its gone client is done;
// only after stop reported the client gone.
func (w *clientWatch) waitFired() {
	w.mu.Lock()
	fired := w.fired
	w.mu.Unlock()
	if fired != nil {
		<-fired
	}
}

// check is one tick: peek, and finish the call if the client is gone.
func (w *clientWatch) check() {
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
	w.gone = max(time.Since(w.start), 1)
	w.stopped = true
	w.fired = make(chan struct{})
	w.mu.Unlock()
	// Not on the ticking goroutine: finishing a call can take long (its
	// prompt counted exactly, a report to a new owner), and every other
	// call's peek would wait for it.
	go w.fire()
}

// stop ends the watch when Do returns. It reports whether the client was
// found gone, the call then being finished (or about to be, by check).
func (w *clientWatch) stop() bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	w.stopped = true
	gone := w.gone > 0
	list := w.list
	w.list = nil // a second stop removes nothing
	w.mu.Unlock()
	if list != nil {
		list.remove(w)
	}
	return gone
}

// watchList holds the watches of calls waiting for their upstream. One
// goroutine ticks every hangupCheck while any is listed (it starts with the
// first and ends at a tick that finds none) and peeks for each listed at
// the tick: the cost is per tick, not per call (at 20 000 calls/s of 50 µs,
// one or two are in flight at a tick). A timer per call cost more than the
// rest of the watch (its heap insert and delete, on every request). Shards
// keep concurrent calls off one lock, and a call finds the goroutine
// running without taking any other.
type watchList struct {
	shards [watchShards]watchShard
	// running: the ticking goroutine is on. add lists a watch, then
	// starts the goroutine if it is off; tick turns it off, then looks
	// again: a watch listed meanwhile is seen by one or the other.
	running atomic.Bool
}

const watchShards = 16

// peeksPerGoroutine is how many watches one goroutine peeks at in a tick
// (a peek is 1–3 µs).
const peeksPerGoroutine = 1024

type watchShard struct {
	mu sync.Mutex
	ws []*clientWatch
	_  [32]byte // 64 bytes: a cache line each
}

func (l *watchList) add(w *clientWatch) {
	s := &l.shards[rand.Uint32()%watchShards]
	s.mu.Lock()
	w.list, w.idx = s, len(s.ws)
	s.ws = append(s.ws, w)
	s.mu.Unlock()
	if !l.running.Load() && l.running.CompareAndSwap(false, true) {
		go l.tick()
	}
}

func (s *watchShard) remove(w *clientWatch) {
	s.mu.Lock()
	last := len(s.ws) - 1
	moved := s.ws[last]
	s.ws[w.idx], moved.idx = moved, w.idx
	s.ws[last] = nil
	s.ws = s.ws[:last]
	s.mu.Unlock()
}

// tick peeks, every hangupCheck, for the calls listed; it returns at a
// tick that finds none.
func (l *watchList) tick() {
	t := time.NewTicker(hangupCheck)
	defer t.Stop()
	var due []*clientWatch
	for range t.C {
		due = due[:0]
		for i := range l.shards {
			s := &l.shards[i]
			s.mu.Lock()
			due = append(due, s.ws...)
			s.mu.Unlock()
		}
		if len(due) <= peeksPerGoroutine {
			for _, w := range due {
				w.check()
			}
		} else {
			// Many calls waiting (LLM calls last seconds: a busy node
			// has tens of thousands in flight): peeked on every core, so
			// that one pass still fits in a tick.
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

func (l *watchList) empty() bool {
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

// clientGone ends a call whose client hung up before the upstream answered:
// the answer (or the error) is dropped, and the connection closed after
// whatever fasthttp still tries to write on it.
func (r *Router) clientGone(ctx *fasthttp.RequestCtx, c *call, w *clientWatch, resp *fasthttp.Response, err error) {
	status := 0
	w.waitFired()
	if err == nil {
		status = resp.StatusCode()
		r.metrics.answered(c.prov.Name, status)
		r.learnProvider(c, &resp.Header, status)
		if u, ok, completion, whole := r.lateUsage(c, status, resp); whole {
			// An answer read whole: the provider generated (and bills)
			// it for the client that left, and says how much.
			r.settleLate(c, u, ok, completion)
		}
	}
	fasthttp.ReleaseResponse(resp) // an unread stream: closes the upstream connection
	// Then the provider's slot: the provider stops at its next write
	// (docs/limits.md).
	r.releaseHeld(c)
	ctx.SetConnectionClose()
	fail(ctx, statusClientClosed, "invalid_request_error", "client_closed_request",
		"The client closed the connection before the upstream answered; the call was dropped.")
	r.log.Info("client_gone", "tenant", c.t.name, "upstream", c.prov.Name,
		"gone_ms", w.gone.Milliseconds(), "waited_ms", time.Since(w.start).Milliseconds(),
		"upstream_status", status, "upstream_error", errString(err))
}

// lateUsage reads the usage of the answer to a call whose client is gone,
// as forward and stream would have: a JSON answer, or an SSE one (by its
// Content-Type or its first line), read whole (a JSON request), or an
// answer to a stream request that is not text/event-stream, read now
// (bounded by maxAnswerBytes). whole is false for a stream left unread:
// dropping it closes the connection and cuts the generation, whose length
// is unknown (the reservation stands).
func (r *Router) lateUsage(c *call, status int, resp *fasthttp.Response) (u upstream.Usage, ok bool, completion int, whole bool) {
	sse := bytes.HasPrefix(resp.Header.ContentType(), []byte("text/event-stream"))
	var body []byte
	if resp.BodyStream() != nil {
		if sse {
			return u, false, 0, false
		}
		var read fasthttp.Response
		if err := readAnswer(&read, resp); err != nil {
			return u, false, 0, false
		}
		body = read.Body()
	} else {
		body = resp.Body() // (with a body stream, Body would read it)
	}
	if status == fasthttp.StatusOK && (sse || upstream.LooksLikeSSE(body)) {
		u, ok, completion = r.filterWhole(c, body, func([]byte) error { return nil })
		return u, ok, completion, true
	}
	u, ok, completion = r.answerUsage(c, status, body)
	return u, ok, completion, true
}

// statusClientClosed is nginx's 499, "client closed request": written to a
// connection nobody reads, or to a client that half-closed it.
const statusClientClosed = 499
