package router

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/ring"
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

// A request waiting in its tenant's line waits on the node's clock: with
// five minutes' wait budget, they pass when the clock says so, and the
// request is refused then, not five minutes of wall time later. The slot
// it waits for is held for less than its slot TTL.
func TestQueueWaitOnTheNodesClock(t *testing.T) {
	clk := clockwork.NewFakeClock()
	r, cfg := testRouter(t, Options{Clock: clk})
	cfg.Queue.InteractiveWait = 5 * time.Minute
	cfg.Tenants = []config.Tenant{{Name: "acme", Keys: []string{"k"}, RPM: 100, TPM: 1 << 30, Concurrency: 1,
		Priority: config.PriorityInteractive}}
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	r.SetView(View{Ring: ring.New(1, []string{"t"}), Members: []Member{{Name: "t", Addr: "127.0.0.1:1", State: "active"}}})
	tn := r.state.Load().byName["acme"]
	if _, d := tn.c().lim.Admit(r.clock(), 1); !d.Allowed { // a call in flight holds the one slot
		t.Fatalf("the first call was refused: %+v", d)
	}
	addr := serveRouter(t, r)
	status := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer k")
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			status <- 0
			return
		}
		resp.Body.Close()
		status <- resp.StatusCode
	}()
	for deadline := time.Now().Add(10 * time.Second); tn.c().queue.Waiting() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the request never waited in its tenant's line")
		}
		select {
		case s := <-status:
			t.Fatalf("answered %d at once", s)
		default:
		}
	}
	clk.Advance(5 * time.Minute)
	if s := <-status; s != http.StatusTooManyRequests {
		t.Fatalf("status %d once the node's clock passed the wait budget, want 429 (0: no answer in 10 s of wall time)", s)
	}
}
