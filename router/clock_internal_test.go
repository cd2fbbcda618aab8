package router

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/ring"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// someDay is where the tests' fake clocks start: far from the wall
// clock, so a deadline on one compared with the other shows.
var someDay = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// A request waiting in its tenant's line waits on the node's clock: with
// five minutes' wait budget, they pass when the clock says so, and the
// request is refused then, not five minutes of wall time later. The slot
// it waits for is held for less than its slot TTL.
func TestQueueWaitOnTheNodesClock(t *testing.T) {
	clk := clockwork.NewFakeClockAt(someDay)
	r, tn := clockedTenant(t, clk, "127.0.0.1:1", config.Tenant{Concurrency: 1})
	if _, d := tn.Core().Lim.Admit(r.clock(), 1); !d.Allowed { // a call in flight holds the one slot
		t.Fatalf("the first call was refused: %+v", d)
	}
	status := sendWhenQueued(t, r, tn)
	clk.Advance(5 * time.Minute)
	if s := <-status; s != http.StatusTooManyRequests {
		t.Fatalf("status %d once the node's clock passed the wait budget, want 429 (0: no answer in 10 s of wall time)", s)
	}
}

// A request refused on its tenant's requests, with the room due within
// its wait budget by the node's clock, waits for it and is served when
// the clock brings it; whether it may wait is judged on the same clock as
// its wait (on the wall clock, a fake clock's deadline has long passed).
func TestRateWaitOnTheNodesClock(t *testing.T) {
	clk := clockwork.NewFakeClockAt(someDay)
	_, upAddr := startFake(t, fakeupstream.Options{CompletionMin: 5, CompletionMax: 5})
	r, tn := clockedTenant(t, clk, upAddr, config.Tenant{RPM: 1})
	if _, d := tn.Core().Lim.Admit(r.clock(), 1); !d.Allowed { // the window's one request
		t.Fatalf("the first call was refused: %+v", d)
	}
	status := sendWhenQueued(t, r, tn)
	clk.Advance(61 * time.Second) // the first request leaves the window
	if s := <-status; s != http.StatusOK {
		t.Fatalf("status %d once the node's clock brought room, want 200 (0: no answer in 10 s of wall time)", s)
	}
}

// clockedTenant is a standalone router on clk, owning tenant "acme" (key
// "k", interactive, a five-minute wait, the limits of lim) on the upstream
// at upAddr.
func clockedTenant(t *testing.T, clk clockwork.Clock, upAddr string, lim config.Tenant) (*Router, *tenant.Tenant) {
	t.Helper()
	r, cfg := testRouter(t, Options{Clock: clk})
	cfg.Upstreams[0].BaseURL = "http://" + upAddr
	cfg.Queue.InteractiveWait = 5 * time.Minute
	lim.Name, lim.Keys, lim.Priority = "acme", []string{"k"}, config.PriorityInteractive
	cfg.Tenants = []config.Tenant{lim}
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	r.SetView(View{Ring: ring.New(1, []string{"t"}), Members: []Member{{Name: "t", Addr: "127.0.0.1:1", State: "active"}}})
	return r, r.state.Load().ByName["acme"]
}

// sendWhenQueued serves r and sends a chat completion for tn's key; it
// returns once the request waits in tn's line, and the status comes on
// the channel (0: no answer within 10 s).
func sendWhenQueued(t *testing.T, r *Router, tn *tenant.Tenant) <-chan int {
	t.Helper()
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
	for deadline := time.Now().Add(10 * time.Second); tn.Core().Queue.Waiting() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the request never waited in its tenant's line")
		}
		select {
		case s := <-status:
			t.Fatalf("answered %d at once", s)
		default:
		}
	}
	return status
}
