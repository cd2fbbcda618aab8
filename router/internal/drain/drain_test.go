package drain

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// A drain waits on the node's clock, and hears the last request end
// rather than look for it: on a fake clock nothing ends the wait but the
// clock and the request.
func TestWaitIdleOnTheNodesClock(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d := New(clk, slog.New(slog.DiscardHandler))
	d.Start() // two requests in flight
	d.Start()
	d.Begin()
	idle := make(chan bool, 1)
	go func() { idle <- d.WaitIdle(time.Second, 10*time.Second) }()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := clk.BlockUntilContext(ctx, 2); err != nil {
		t.Fatalf("the drain set no timers on the node's clock: %v", err)
	}
	clk.Advance(time.Second) // the grace is over; requests still in flight
	d.Done()
	select {
	case ok := <-idle:
		t.Fatalf("the drain ended (%v) with a request in flight", ok)
	case <-time.After(50 * time.Millisecond):
	}
	d.Done()
	if ok := <-idle; !ok {
		t.Fatal("the drain timed out though the last request ended within its timeout")
	}

	// Busy at the deadline: not idle in time.
	d.Start()
	go func() { idle <- d.WaitIdle(0, 5*time.Second) }()
	if err := clk.BlockUntilContext(ctx, 1); err != nil { // no grace: its deadline alone
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	if ok := <-idle; ok {
		t.Fatal("the drain said idle with a request in flight at its deadline")
	}
}
