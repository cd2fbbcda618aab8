package router

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/limiter"
)

// A request that another node bounced back here, for a tenant frozen for
// that node, is taken back at once even when it meets the freeze in the
// tenant's queue, behind others. Before, it left the line for the other
// node with its hops spent (its last hop: 503 tenant_moving) and the
// tenant stayed frozen until Reconcile.
//
// Here the tenant (concurrency 1) has a call running when a hop from "p",
// at the hop limit, joins its line; the tenant is then frozen for "p" (by
// hand: no hand-over kicks the line). When the call ends, the hop's turn
// finds the tenant frozen for the node that sent it.
func TestQueuedBounceTakenBack(t *testing.T) {
	fake, upAddr := startFake(t, fakeupstream.Options{Latency: time.Second, CompletionMin: 5, CompletionMax: 5})
	r, rg := queuedHopRouter(t, upAddr, nil)
	lim := r.state.Load().ByName["acme"].Core().Lim
	var frozen atomic.Pointer[limiter.State]
	var taken atomic.Int32
	r.moves.SetTakeBack(func(tenant, other string) bool {
		if tenant != "acme" || other != "p" {
			t.Errorf("take back %s from %s, want acme from p", tenant, other)
			return false
		}
		// What "p" hands back: the requests counted, the running call
		// ended (its end was reported to p).
		taken.Add(1)
		lim.Import(r.clock(), limiter.State{Requests: frozen.Load().Requests})
		return true
	})

	first, done, resp := hopBehindCall(t, r, rg, maxHops)
	st := lim.Freeze(r.clock(), "p")
	frozen.Store(&st)
	fake.SetOptions(fakeupstream.Options{CompletionMin: 5, CompletionMax: 5})

	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		t.Fatalf("the bounced hop: %d %s, want 200 (taken back and served here)", resp.StatusCode(), resp.Body())
	}
	if n := taken.Load(); n != 1 {
		t.Errorf("taken back %d times, want 1", n)
	}
	if to := lim.MovedTo(); to != "" {
		t.Errorf("after the hop the tenant is still frozen for %q", to)
	}
	if s := <-first; s != http.StatusOK {
		t.Errorf("the first call: %d, want 200", s)
	}
}
