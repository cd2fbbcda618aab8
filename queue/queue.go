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
// The package knows nothing of HTTP, tenants or limits: the router asks it
// to Wait with a Try, and Kicks it when capacity frees.
package queue

import (
	"container/list"
	"errors"
	"sync"
	"sync/atomic"
	"time"
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

// Queue is one limit's line. The zero Queue is ready.
type Queue struct {
	waiting atomic.Int32 // read without the lock on the hot path

	mu         sync.Mutex
	lines      [2]list.List
	sinceBatch int         // admissions from the line since the last batch one
	trying     *waiter     // the head while it tries
	kicked     bool        // a Kick came while the head tried: the next head tries at once
	timer      *time.Timer // the head's retry
}

type waiter struct {
	class Class
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
	return q.lines[c].Len()
}

// Wait queues a request of class (at most maxDepth of it waiting) until try
// says it was decided, deadline passes, or cancel is closed, and reports
// how long it waited.
func (q *Queue) Wait(c Class, maxDepth int, deadline time.Time, cancel <-chan struct{}, try Try) (time.Duration, error) {
	w := &waiter{class: c, wake: make(chan struct{}, 1), since: time.Now()}
	q.mu.Lock()
	if q.lines[c].Len() >= maxDepth {
		q.mu.Unlock()
		return 0, ErrFull
	}
	w.elem = q.lines[c].PushBack(w)
	q.waiting.Add(1)
	q.mu.Unlock()
	q.Kick() // it may be the head

	budget := time.NewTimer(time.Until(deadline))
	defer budget.Stop()
	for {
		select {
		case <-w.wake:
		case <-budget.C:
			q.leave(w)
			return time.Since(w.since), ErrTimeout
		case <-cancel:
			q.leave(w)
			return time.Since(w.since), ErrCanceled
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
			return time.Since(w.since), nil
		}
		if retry > 0 {
			if q.timer != nil {
				q.timer.Stop()
			}
			q.timer = time.AfterFunc(retry, q.Kick)
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
	inter, batch := q.lines[Interactive].Front(), q.lines[Batch].Front()
	switch {
	case inter == nil && batch == nil:
		return nil
	case batch == nil:
		return inter.Value.(*waiter)
	case inter == nil || q.sinceBatch >= BatchShare-1:
		return batch.Value.(*waiter)
	}
	return inter.Value.(*waiter)
}

// remove takes w out of its line; admitted: it got in (for the share).
// q.mu is held.
func (q *Queue) remove(w *waiter, admitted bool) {
	if w.elem == nil {
		return
	}
	q.lines[w.class].Remove(w.elem)
	w.elem = nil
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
