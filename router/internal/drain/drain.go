// Package drain counts what a node is serving (client requests and
// streams in flight) and runs its drain: once begun, every answer closes
// its connection, and the drain waits for the last call to end, hearing it
// end rather than looking for it.
//
// It knows nothing of HTTP, tenants or the cluster: the router says when a
// call starts and ends, and the node when to drain.
package drain

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
)

// Drain is a node's calls in flight and its drain. Make one with New.
type Drain struct {
	clock clockwork.Clock
	log   *slog.Logger

	active   atomic.Int64
	draining atomic.Bool
	// idle hears, while draining, that active came to 0 (WaitIdle).
	idle chan struct{}
}

// New is a drain on clk, logging to log.
func New(clk clockwork.Clock, log *slog.Logger) *Drain {
	return &Drain{clock: clk, log: log, idle: make(chan struct{}, 1)}
}

// Start counts a call in; it reports whether the node drains, when the
// call's connection must close (clients must not reuse a connection to a
// node about to go).
func (d *Drain) Start() (draining bool) {
	d.active.Add(1)
	return d.draining.Load()
}

// Done counts a call out.
func (d *Drain) Done() {
	if d.active.Add(-1) == 0 && d.draining.Load() {
		select {
		case d.idle <- struct{}{}:
		default: // WaitIdle has one to hear already
		}
	}
}

// Active is the calls in flight.
func (d *Drain) Active() int64 { return d.active.Load() }

// Draining reports whether the drain has begun.
func (d *Drain) Draining() bool { return d.draining.Load() }

// Begin begins the drain, once.
func (d *Drain) Begin() {
	if d.draining.CompareAndSwap(false, true) {
		d.log.Info("drain", "phase", "start", "in_flight", d.active.Load())
	}
}

// WaitIdle waits until no call is in flight and at least grace has passed
// (time for load balancers to see /readyz fail), at most timeout. It
// reports whether the node went idle in time. It begins the drain if it
// has not begun: a draining node hears its last call end.
func (d *Drain) WaitIdle(grace, timeout time.Duration) bool {
	d.Begin()
	start := d.clock.Now()
	graced := d.clock.NewTimer(grace)
	defer graced.Stop()
	deadline := d.clock.NewTimer(timeout)
	defer deadline.Stop()
wait:
	for inGrace := grace > 0; inGrace || d.active.Load() > 0; {
		select {
		case <-graced.Chan():
			inGrace = false
		case <-d.idle:
		case <-deadline.Chan():
			// Idle at the deadline, its grace over, is in time.
			if d.active.Load() > 0 || d.clock.Since(start) < grace {
				d.log.Warn("drain", "phase", "timeout", "in_flight", d.active.Load())
				return false
			}
			break wait
		}
	}
	d.log.Info("drain", "phase", "idle", "waited_ms", d.clock.Since(start).Milliseconds())
	return true
}
