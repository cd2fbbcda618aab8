package hangup

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
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
			ws[i] = &Watch{stopped: true, clk: wallClock}
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
	wa := &Watch{conn: sa, clk: wallClock, start: time.Now(), onGone: func(any) {
		close(inA)
		time.Sleep(time.Second)
	}}
	wb := &Watch{conn: sb, clk: wallClock, start: time.Now(), onGone: func(any) { bGoneAt.Store(time.Now().UnixNano()) }}
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
		warm := &Watch{stopped: true, clk: wallClock}
		l.add(warm) // starts the goroutine
		warm.Stop() // its next tick finds none and stops it
		time.Sleep(Check + time.Duration(round)*Check/20 - Check/2)
		c, s := tcpPair(t)
		gone := make(chan struct{})
		w := &Watch{conn: s, clk: wallClock, start: time.Now(), onGone: func(any) { close(gone) }}
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

// The peeks tick on the List's clock, and a watch's times are read on it:
// on a fake clock a client that hung up is found at the first tick the
// clock is advanced to, gone one Check after the watch began.
func TestWatchOnTheListsClock(t *testing.T) {
	clk := clockwork.NewFakeClock()
	l := List{Clock: clk}
	c, s := tcpPair(t)
	gone := make(chan struct{})
	w := l.Watch(s, New(func(any) { close(gone) }, nil))
	defer w.Stop()
	c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := clk.BlockUntilContext(ctx, 1); err != nil {
		t.Fatalf("no ticker on the list's clock: %v", err)
	}
	time.Sleep(3 * Check) // wall time: no peek comes of it
	if w.WasGone() {
		t.Fatal("a peek ran before the list's clock ticked")
	}
	clk.Advance(Check)
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the hang-up was not found at the clock's tick")
	}
	clk.Advance(time.Second)
	if after, watched := w.Gone(); after != Check || watched != Check+time.Second {
		t.Fatalf("gone after %s, watched %s; want %s and %s on the list's clock", after, watched, Check, Check+time.Second)
	}
}
