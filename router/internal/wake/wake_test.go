package wake

import (
	"testing"
	"time"
)

// The guard refuses while the node catches up, and once its watchdog has
// been silent for longer than the pause limit; without a limit, silence
// means nothing.
func TestGuard(t *testing.T) {
	var g Guard
	at := func(age time.Duration) func() time.Duration { return func() time.Duration { return age } }
	if g.CatchingUp(func() time.Duration { t.Fatal("a guard with no watchdog reads the clock"); return 0 }) {
		t.Fatal("a guard with no watchdog refuses")
	}
	g.SetCatchingUp(true)
	if !g.CatchingUp(at(0)) {
		t.Fatal("catching up: not refused")
	}
	g.SetCatchingUp(false)
	g.SetPauseLimit(50*time.Millisecond, time.Second)
	if g.CatchingUp(at(time.Second + 50*time.Millisecond)) {
		t.Fatal("refused within the pause limit")
	}
	if !g.CatchingUp(at(time.Second + 51*time.Millisecond)) {
		t.Fatal("a watchdog silent past the limit: not refused")
	}
	g.Heartbeat(2 * time.Second)
	if g.CatchingUp(at(2*time.Second + 10*time.Millisecond)) {
		t.Fatal("refused right after a tick")
	}
}
