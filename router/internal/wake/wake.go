// Package wake is a node's guard against deciding on stale ownership after
// a pause: it owns the pause limit, the watchdog's last tick and the
// catching-up flag, and answers whether the node may decide now. It knows
// nothing of requests, tenants or answers: refusing a request is the
// router's.
//
// A node that stood still for longer than failure detection (SIGSTOP, a VM
// pause, a long stall) may have been declared dead meanwhile and its
// tenants taken over by others. When it runs again, its ring, its limiters
// and the requests waiting in its accept backlog are all from before: it
// must not decide as an owner on them. The node watches for such a pause
// and catches up (node/wake.go); the router's part is to refuse, until it
// has, to decide anything:
//
//   - while the node says it is catching up (SetCatchingUp), and
//   - whenever the node's watchdog has not ticked (Heartbeat) for longer than
//     the pause limit: the requests the server reads right after a wake-up,
//     before the watchdog's goroutine has run and noticed.
//
// A client request then gets 503 not_ready with Retry-After: 1; a hop is
// refused with x-ringgate-hop-refused: not_ready, so that its edge answers
// 503 too (the router's ownerRefused). Nothing is admitted on stale
// ownership.
//
// Times are the node's age (time.Since its start, on the monotonic clock),
// given by the caller: a wall clock set back or forward moves nothing.
package wake

import (
	"sync/atomic"
	"time"
)

// Guard is the router's view of the node's pause watchdog. Its zero value
// has no watchdog and is not catching up.
type Guard struct {
	limit    atomic.Int64 // ns; 0: no watchdog
	beat     atomic.Int64 // the node's age, in ns, at the last tick
	catching atomic.Bool
}

// SetPauseLimit arms the check at age now: from then on, a watchdog silent
// for longer than d means the node was stopped. The node's watchdog must
// call Heartbeat more often than that.
func (g *Guard) SetPauseLimit(d, now time.Duration) {
	g.Heartbeat(now)
	g.limit.Store(int64(d))
}

// Heartbeat is the node watchdog's tick, at age now.
func (g *Guard) Heartbeat(now time.Duration) { g.beat.Store(int64(now)) }

// SetCatchingUp says whether the node is catching up after a pause.
func (g *Guard) SetCatchingUp(on bool) { g.catching.Store(on) }

// CatchingUp reports whether the node must not decide now; age is the
// node's age, read only when a watchdog is armed: a node without one
// reads no clock a request.
func (g *Guard) CatchingUp(age func() time.Duration) bool {
	if g.catching.Load() {
		return true
	}
	limit := g.limit.Load()
	return limit > 0 && int64(age())-g.beat.Load() > limit
}
