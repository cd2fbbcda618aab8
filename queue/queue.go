// Package queue orders the requests that wait for one limit's capacity: a
// bounded line per class (interactive, batch), each waiter's own wait
// budget, and admission the moment capacity may have freed.
//
// Only the head of the line tries to get in (Try, the caller's decision);
// the others wait. The head tries again when Kick says capacity may have
// freed (a slot released, a report applied, a state imported) or when its
// last refusal said it would (a bucket leaving the window): a timer for the
// head, no polling per waiter. A request that finds others waiting joins
// the line rather than try first, so the line is first come, first served
// within a class.
//
// Interactive goes before batch, but one admission from the line in every
// BatchShare goes to a waiting batch request: batch is never starved, and
// its share does not depend on how long it waited (aging would let a long
// batch backlog crowd interactive out once old enough).
//
// Within a class, waiters belong to flows (a provider's limit is shared by
// tenants: one flow each), served by start-time fair queueing: the head is
// the first waiter of the flow that got least so far for its weight, so a
// flow's share of the admissions follows its weight, whatever the others
// send. A flow that falls idle keeps no credit. One flow (a tenant's own
// line) is first come, first served.
//
// The package knows nothing of HTTP, tenants or limits: the router asks it
// to Wait with a Try, and Kicks it when capacity frees. Its waits and
// timers run on the Queue's Clock, the node's one clock.
package queue

import (
	"container/list"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
)

// Class is a request's place in the order.
type Class uint8

const (
	Interactive Class = iota
	Batch
)

func (c Class) String() string {
	if c == Batch {
		return "batch"
	}
	return "interactive"
}

// BatchShare: one admission from the line in every BatchShare goes to a
// waiting batch request, while interactive ones wait too.
const BatchShare = 4

// Why a wait ended without the request being decided.
var (
	ErrFull     = errors.New("queue full")
	ErrTimeout  = errors.New("wait budget spent")
	ErrCanceled = errors.New("wait canceled")
)

// Try is one attempt at admission. done: it was decided, the wait is over
// — admitted, or, with retry < 0, decided otherwise (refused for good,
// sent elsewhere), which does not count in the batch share; else retry is
// when capacity is expected (0: only a Kick will tell).
type Try func() (done bool, retry time.Duration)

// Flow is who a waiter waits for, in a line shared by several: Key names
// it; Weight is its share (its own limit, say); Cost what one admission
// takes of it (1 a request, or its tokens). The zero Flow is one flow of
// weight 1, cost 1.
type Flow struct {
	Key    string
	Weight float64
	Cost   float64
}

// Queue is one limit's line. The zero Queue is ready, on the wall clock.
type Queue struct {
	// Clock is what waits, deadlines and retries are timed on; nil is the
	// wall clock. Set it before the first Wait.
	Clock clockwork.Clock

	waiting atomic.Int32 // read without the lock on the hot path

	mu sync.Mutex
	// lines are made at the first Wait: a gateway has a queue for each of
	// its many tenants, and few of them ever wait.
	lines      *[2]line
	sinceBatch int             // admissions from the line since the last batch one
	trying     *waiter         // the head while it tries
	kicked     bool            // a Kick came while the head tried: the next head tries at once
	timer      clockwork.Timer // the head's retry
}

var wallClock = clockwork.NewRealClock()

func (q *Queue) clock() clockwork.Clock {
	if q.Clock != nil {
		return q.Clock
	}
	return wallClock
}

// line is one class: its flows, those with waiters in the order they
// started waiting, and the virtual time (the start tag of the last
// admission).
type line struct {
	n      int
	flows  map[string]*flow
	active []*flow
	vnow   float64
}

type flow struct {
	key     string
	waiters list.List
	next    float64 // the virtual start of its next admission
}

type waiter struct {
	class Class
	flow  *flow
	cost  float64 // in virtual time: Cost / Weight
	wake  chan struct{}
	elem  *list.Element
	since time.Time
}

// Waiting reports how many requests wait. It takes no lock.
func (q *Queue) Waiting() int { return int(q.waiting.Load()) }

// Depth reports how many requests of class wait.
func (q *Queue) Depth(c Class) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.lines == nil {
		return 0
	}
	return q.lines[c].n
}

// EachFlow calls fn for every flow with requests waiting, with its class
// and how many wait. fn runs under the queue's lock: it must not call the
// queue.
func (q *Queue) EachFlow(fn func(key string, c Class, waiting int)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.lines == nil {
		return
	}
	for c := range q.lines {
		for _, f := range q.lines[c].active {
			fn(f.key, Class(c), f.waiters.Len())
		}
	}
}

// Oldest reports how long the longest-waiting request of class has waited
// (0: none waits).
func (q *Queue) Oldest(c Class) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.lines == nil {
		return 0
	}
	var first time.Time
	for _, f := range q.lines[c].active {
		if w := f.waiters.Front().Value.(*waiter); first.IsZero() || w.since.Before(first) {
			first = w.since
		}
	}
	if first.IsZero() {
		return 0
	}
	return q.clock().Since(first)
}

// Wait queues a request of class for f (at most maxDepth of the flow's
// class waiting) until try says it was decided, deadline passes, or cancel
// is closed, and reports how long it waited.
func (q *Queue) Wait(c Class, f Flow, maxDepth int, deadline time.Time, cancel <-chan struct{}, try Try) (time.Duration, error) {
	clk := q.clock()
	w := &waiter{class: c, wake: make(chan struct{}, 1), since: clk.Now(), cost: 1}
	if f.Weight > 0 {
		w.cost = max(f.Cost, 1) / f.Weight
	}
	q.mu.Lock()
	if q.lines == nil {
		q.lines = new([2]line)
	}
	if !q.lines[c].join(w, f.Key, maxDepth) {
		q.mu.Unlock()
		return 0, ErrFull
	}
	q.waiting.Add(1)
	q.mu.Unlock()
	q.Kick() // it may be the head

	budget := clk.NewTimer(clk.Until(deadline))
	defer budget.Stop()
	for {
		select {
		case <-w.wake:
		case <-budget.Chan():
			q.leave(w)
			return clk.Since(w.since), ErrTimeout
		case <-cancel:
			q.leave(w)
			return clk.Since(w.since), ErrCanceled
		}
		q.mu.Lock()
		if q.head() != w || q.trying != nil {
			q.mu.Unlock()
			continue
		}
		q.trying = w
		q.mu.Unlock()
		done, retry := try()
		q.mu.Lock()
		q.trying = nil
		if q.kicked {
			// Room may have freed while it tried: whoever is head now
			// tries again.
			q.kicked = false
			q.wakeHead()
		}
		if done {
			q.remove(w, retry >= 0)
			q.mu.Unlock()
			q.Kick() // the next one may fit too
			return clk.Since(w.since), nil
		}
		if retry > 0 {
			if q.timer != nil {
				q.timer.Stop()
			}
			q.timer = clk.AfterFunc(retry, q.Kick)
		}
		q.mu.Unlock()
	}
}

// Kick tells the line capacity may have freed: its head tries again. It
// costs one atomic load when nobody waits.
func (q *Queue) Kick() {
	if q.waiting.Load() == 0 {
		return
	}
	q.mu.Lock()
	if q.trying != nil {
		q.kicked = true
	}
	q.wakeHead()
	q.mu.Unlock()
}

// wakeHead wakes the head; q.mu is held.
func (q *Queue) wakeHead() {
	if h := q.head(); h != nil {
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
}

// head is the waiter whose turn it is; q.mu is held.
func (q *Queue) head() *waiter {
	if q.lines == nil {
		return nil
	}
	inter, batch := q.lines[Interactive].head(), q.lines[Batch].head()
	switch {
	case batch == nil:
		return inter
	case inter == nil || q.sinceBatch >= BatchShare-1:
		return batch
	}
	return inter
}

// join puts w at the end of its flow's waiters, unless maxDepth of them
// wait. A flow that starts waiting starts at the line's virtual time: what
// it did not use while idle is not owed to it.
func (l *line) join(w *waiter, key string, maxDepth int) bool {
	f := l.flows[key]
	if f == nil {
		if l.flows == nil {
			l.flows = make(map[string]*flow)
		}
		f = &flow{key: key}
		l.flows[key] = f
	}
	if f.waiters.Len() >= maxDepth {
		return false
	}
	if f.waiters.Len() == 0 {
		f.next = max(f.next, l.vnow)
		l.active = append(l.active, f)
	}
	w.flow, w.elem = f, f.waiters.PushBack(w)
	l.n++
	return true
}

// head is the first waiter of the active flow that starts first (the
// earliest to start waiting among equals).
func (l *line) head() *waiter {
	var best *flow
	for _, f := range l.active {
		if best == nil || f.next < best.next {
			best = f
		}
	}
	if best == nil {
		return nil
	}
	return best.waiters.Front().Value.(*waiter)
}

// remove takes w out; admitted: its flow moves on by its cost.
func (l *line) remove(w *waiter, admitted bool) {
	f := w.flow
	f.waiters.Remove(w.elem)
	w.elem = nil
	l.n--
	if admitted {
		l.vnow = max(l.vnow, f.next)
		f.next += w.cost
	}
	if f.waiters.Len() > 0 {
		return
	}
	for i, a := range l.active {
		if a == f {
			l.active = append(l.active[:i], l.active[i+1:]...)
			break
		}
	}
	if len(l.flows) > 2*len(l.active)+16 {
		// Idle flows whose debt is paid carry nothing: drop them.
		for k, g := range l.flows {
			if g.waiters.Len() == 0 && g.next <= l.vnow {
				delete(l.flows, k)
			}
		}
	}
}

// remove takes w out of its line; admitted: it got in (for the shares).
// q.mu is held.
func (q *Queue) remove(w *waiter, admitted bool) {
	if w.elem == nil {
		return
	}
	q.lines[w.class].remove(w, admitted)
	q.waiting.Add(-1)
	if admitted {
		if w.class == Batch {
			q.sinceBatch = 0
		} else {
			q.sinceBatch++
		}
	}
	if q.waiting.Load() == 0 && q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
}

// leave takes w out without admission and lets the next head try.
func (q *Queue) leave(w *waiter) {
	q.mu.Lock()
	q.remove(w, false)
	q.mu.Unlock()
	q.Kick()
}
