// Package logmeter rate-limits one kind of log line about one thing (a
// limit's shadow_refusal, a tenant's delta_lost): a burst writes one line,
// the next says how many it stands for. It owns the counting only: what
// the line says, and how often it may be written, are its caller's.
package logmeter

import (
	"sync/atomic"
	"time"
)

// Meter is one kind of line's meter; its zero value is ready.
type Meter struct {
	Last atomic.Int64 // when the last line was written (ns)
	Mute atomic.Int64 // lines not written since
}

// Allow reports whether a line may be written at now (ns), at most one an
// every, and how many were not written since the last one. A clock that
// stepped back (a wall clock set) starts a new period: the lines are not
// muted until it catches up with the last.
func (m *Meter) Allow(now int64, every time.Duration) (bool, int64) {
	last := m.Last.Load()
	if (now >= last && now-last < int64(every)) || !m.Last.CompareAndSwap(last, now) {
		m.Mute.Add(1)
		return false, 0
	}
	return true, m.Mute.Swap(0)
}
