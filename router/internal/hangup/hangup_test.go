package hangup

import (
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// The hang-up watches' ticking goroutine runs only while calls are
// watched: it ends at a tick that finds none listed, and the next watch
// starts it again.
func TestWatchListTicksOnlyWhileWatching(t *testing.T) {
	var l List
	running := l.running.Load
	for round := range 2 {
		ws := make([]*Watch, 2*peeksPerGoroutine+1) // a tick peeks on several goroutines
		for i := range ws {
			// Stopped already: a tick that comes finds nothing to peek.
			ws[i] = &Watch{stopped: true}
			l.add(ws[i])
		}
		if !running() {
			t.Fatalf("round %d: %d watches listed and no goroutine ticking", round, len(ws))
		}
		for _, w := range ws {
			w.Stop()
		}
		if !l.empty() {
			t.Fatalf("round %d: watches still listed after all were removed", round)
		}
		if !poll(5*Check, func() bool { return !running() }) {
			t.Fatalf("round %d: the ticking goroutine still runs %s after the last watch ended", round, 5*Check)
		}
	}
}

// A call whose finish is slow (its prompt counted exactly: 750 ms for a
// 4 MB prompt) does not hold up the peeks at other calls' clients: run on
// the ticking goroutine, a second client's hang-up would be seen only after
// the first's finish (a slot held for 941 ms instead of 0.5 ms).
func TestSlowFinishDoesNotDelayOtherHangups(t *testing.T) {
	var l List
	ca, sa := tcpPair(t)
	cb, sb := tcpPair(t)
	inA := make(chan struct{})
	var bGoneAt atomic.Int64
	wa := &Watch{conn: sa, start: time.Now(), onGone: func(any) {
		close(inA)
		time.Sleep(time.Second)
	}}
	wb := &Watch{conn: sb, start: time.Now(), onGone: func(any) { bGoneAt.Store(time.Now().UnixNano()) }}
	l.add(wa)
	l.add(wb)
	defer wa.Stop()
	defer wb.Stop()
	ca.Close()
	<-inA
	closedB := time.Now()
	cb.Close()
	if !poll(3*time.Second, func() bool { return bGoneAt.Load() != 0 }) {
		t.Fatal("the second client's hang-up was never seen")
	}
	if lag := time.Duration(bGoneAt.Load() - closedB.UnixNano()); lag > 500*time.Millisecond {
		t.Errorf("the second client's hang-up seen %s after it closed (a peek every %s): it waited for the first's finish", lag, Check)
	}
}

// tcpPair is a connected loopback pair: the client's end and the server's.
func tcpPair(t *testing.T) (client net.Conn, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s.(*net.TCPConn)
}

// A watch listed just as the ticking goroutine finds none and stops is
// still peeked at: either the stopping goroutine sees it, or the watch
// starts another. Each round lists a gone client's watch at a moment
// around the goroutine's end.
func TestWatchListedAsTickerStopsIsPeeked(t *testing.T) {
	var l List
	for round := range 20 {
		warm := &Watch{stopped: true}
		l.add(warm) // starts the goroutine
		warm.Stop() // its next tick finds none and stops it
		time.Sleep(Check + time.Duration(round)*Check/20 - Check/2)
		c, s := tcpPair(t)
		gone := make(chan struct{})
		w := &Watch{conn: s, start: time.Now(), onGone: func(any) { close(gone) }}
		c.Close()
		l.add(w)
		select {
		case <-gone:
		case <-time.After(10 * Check):
			t.Fatalf("round %d: a gone client listed around the ticker's end was not seen in %s (ticker running %v)",
				round, 10*Check, l.running.Load())
		}
		w.Stop()
	}
}

// poll reports whether cond holds within d, looking every millisecond.
func poll(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}
