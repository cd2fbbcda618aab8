package router

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// A drain waits on the node's clock, and hears the last request end
// rather than look for it: on a fake clock nothing ends the wait but the
// clock and the request.
func TestWaitIdleOnTheNodesClock(t *testing.T) {
	clk := clockwork.NewFakeClock()
	r, _ := testRouter(t, Options{Clock: clk})
	r.life.active.Add(2) // two requests in flight
	r.BeginDrain()
	idle := make(chan bool, 1)
	go func() { idle <- r.WaitIdle(time.Second, 10*time.Second) }()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := clk.BlockUntilContext(ctx, 2); err != nil {
		t.Fatalf("the drain set no timers on the node's clock: %v", err)
	}
	clk.Advance(time.Second) // the grace is over; requests still in flight
	r.done()
	select {
	case ok := <-idle:
		t.Fatalf("the drain ended (%v) with a request in flight", ok)
	case <-time.After(50 * time.Millisecond):
	}
	r.done()
	if ok := <-idle; !ok {
		t.Fatal("the drain timed out though the last request ended within its timeout")
	}

	// Busy at the deadline: not idle in time.
	r.life.active.Add(1)
	go func() { idle <- r.WaitIdle(0, 5*time.Second) }()
	if err := clk.BlockUntilContext(ctx, 1); err != nil { // no grace: its deadline alone
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	if ok := <-idle; ok {
		t.Fatal("the drain said idle with a request in flight at its deadline")
	}
}
