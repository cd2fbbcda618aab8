package router

import "testing"

// The hang-up watches' ticking goroutine runs only while calls are
// watched: it ends at a tick that finds none listed, and the next watch
// starts it again.
func TestWatchListTicksOnlyWhileWatching(t *testing.T) {
	var l watchList
	running := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.running
	}
	for round := range 2 {
		ws := make([]*clientWatch, 50)
		for i := range ws {
			// Stopped already: a tick that comes finds nothing to peek.
			ws[i] = &clientWatch{stopped: true}
			l.add(ws[i])
		}
		if !running() {
			t.Fatalf("round %d: 50 watches listed and no goroutine ticking", round)
		}
		for _, w := range ws {
			w.stop()
		}
		if !l.empty() {
			t.Fatalf("round %d: watches still listed after all were removed", round)
		}
		if !poll(5*hangupCheck, func() bool { return !running() }) {
			t.Fatalf("round %d: the ticking goroutine still runs %s after the last watch ended", round, 5*hangupCheck)
		}
	}
}
