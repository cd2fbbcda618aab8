package away

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// ErrUndelivered: the deltas did not reach the node counting the tenant;
// ErrNoPath: and cannot (no secret, or too many hand-ons).
var (
	ErrUndelivered = errors.New("deltas not delivered")
	ErrNoPath      = fmt.Errorf("%w: no signed path", ErrUndelivered)
)

// retryFor bounds how long deltas the node counting the tenant did not take
// are sent again; the first retry comes after retryFirst, each next one
// twice as late, at most a second apart.
const (
	retryFor   = 10 * time.Second
	retryFirst = 50 * time.Millisecond
)

// MaxRetries bounds the reports being retried at once.
const MaxRetries = 1024

// Retries are the reports of deltas being sent again.
type Retries struct {
	running atomic.Int64
}

// Running is how many reports are being retried.
func (rs *Retries) Running() int64 { return rs.running.Load() }

// Deliver delivers deltas with try, trying again while they do not get
// through (an owner too busy to accept in time is alive and must learn of
// them: a release lost would hold a slot there until slot_ttl), for a
// window at most: the receiver applies each delta once (package deltaid, for
// two windows), so one that did arrive and is sent again changes nothing.
// Each try looks for the node counting the tenant anew. An error wrapping
// ErrNoPath ends the tries, and so does quit (the node is going).
//
// At most MaxRetries reports are retried at once (each waits on its own
// goroutine): past that, one that fails is lost, and counted in dropped,
// rather than the node's memory grow with the rate of ending calls while
// an owner is out of reach.
func (rs *Retries) Deliver(window time.Duration, quit <-chan struct{}, dropped interface{ Inc() }, try func() error) {
	err := try()
	if err == nil || errors.Is(err, ErrNoPath) {
		return
	}
	if rs.running.Add(1) > MaxRetries {
		rs.running.Add(-1)
		dropped.Inc()
		return
	}
	defer rs.running.Add(-1)
	deadline := time.Now().Add(min(window, retryFor))
	timer := time.NewTimer(retryFirst)
	defer timer.Stop()
	for wait := retryFirst; time.Now().Add(wait).Before(deadline); wait = min(2*wait, time.Second) {
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-quit:
			return // the node is going
		}
		err := try()
		if err == nil || errors.Is(err, ErrNoPath) {
			return
		}
	}
}
