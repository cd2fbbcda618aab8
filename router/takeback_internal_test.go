package router

import (
	"bytes"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/ring"
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

	cfg := config.Default()
	cfg.Node.Name = "t"
	cfg.Cluster.Secret = bytes.Repeat([]byte{7}, 32)
	cfg.Upstreams = []config.Upstream{{Name: "up", Kind: config.KindOpenAI, BaseURL: "http://" + upAddr, Models: []string{"gpt-4o"}}}
	cfg.Queue.InteractiveWait = 5 * time.Second
	cfg.Tenants = []config.Tenant{{Name: "acme", Keys: []string{"k"}, RPM: 100, TPM: 1 << 30, Concurrency: 1,
		Priority: config.PriorityInteractive}}
	r, err := New(Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	rg := ring.New(1, []string{"t"})
	r.SetView(View{Ring: rg, Members: []Member{
		{Name: "p", Addr: deadAddr(t), State: "active"}, {Name: "t", Addr: "127.0.0.1:1", State: "active"}}})
	tn := r.state.Load().byName["acme"]
	lim := tn.c().lim
	var frozen atomic.Pointer[limiter.State]
	var taken atomic.Int32
	r.SetTakeBack(func(tenant, other string) bool {
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

	url := "http://" + serveRouter(t, r) + "/v1/chat/completions"
	body := []byte(`{"model":"gpt-4o","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)

	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	if !poll(2*time.Second, func() bool { return lim.Usage(r.clock()).InFlight == 1 }) {
		t.Fatal("the first call is not running")
	}

	hop := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(hop)
	hop.Header.SetMethod(fasthttp.MethodPost)
	hop.SetRequestURI(url)
	hop.Header.Set("Authorization", "Bearer k")
	hop.Header.SetContentType("application/json")
	hop.SetBody(body)
	r.hops.Sign(hop, "p", "t", rg.Version(), maxHops)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	done := make(chan error, 1)
	go func() { done <- fasthttp.DoTimeout(hop, resp, 10*time.Second) }()
	if !poll(2*time.Second, func() bool { return tn.c().queue.Waiting() == 1 }) {
		t.Fatal("the hop is not waiting in the tenant's line")
	}
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
