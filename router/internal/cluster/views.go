package cluster

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
)

// Views holds this node's cluster view, and wakes the requests waiting for
// it to change: a hop for a tenant this node does not own yet, a request
// for a node its gossip does not list yet. Each waits on the next change,
// not on a timer that polls.
type Views struct {
	cur  atomic.Pointer[Lookup]
	mu   sync.Mutex
	next chan struct{} // closed at the next change; nil: nobody waits
	// Clock is the node's: the waits' budgets; nil is the wall clock.
	Clock clockwork.Clock
}

var wallClock = clockwork.NewRealClock()

func (vs *Views) clock() clockwork.Clock {
	if vs.Clock != nil {
		return vs.Clock
	}
	return wallClock
}

// Load is the view in force.
func (vs *Views) Load() *Lookup { return vs.cur.Load() }

// Swap puts v in force and returns the one it replaces. Those waiting are
// woken by Changed, once what follows from v (each tenant's owner) is
// recorded too.
func (vs *Views) Swap(v *Lookup) *Lookup { return vs.cur.Swap(v) }

// Changed wakes everyone waiting for a change.
func (vs *Views) Changed() {
	vs.mu.Lock()
	if vs.next != nil {
		close(vs.next)
		vs.next = nil
	}
	vs.mu.Unlock()
}

// Await waits until ok holds of the view in force, looking again at each
// change, for at most wait. It returns the view it looked at last and
// whether ok held of it.
func (vs *Views) Await(wait time.Duration, ok func(*Lookup) bool) (*Lookup, bool) {
	var timeout <-chan time.Time
	for {
		vs.mu.Lock()
		if vs.next == nil {
			vs.next = make(chan struct{})
		}
		next := vs.next // taken before looking: a change in between is not missed
		vs.mu.Unlock()
		v := vs.Load()
		if ok(v) {
			return v, true
		}
		if timeout == nil {
			t := vs.clock().NewTimer(wait)
			defer t.Stop()
			timeout = t.Chan()
		}
		select {
		case <-next:
		case <-timeout:
			return v, false
		}
	}
}
