package router

import (
	"bytes"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/ring"
)

// Test machinery shared by this package's internal tests.

// serveRouter serves r's HTTP on a free loopback port until the test ends,
// and returns its address.
func serveRouter(t testing.TB, r *Router) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := r.Server()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return ln.Addr().String()
}

// startFake starts the fake provider with o on a free loopback port until
// the test ends, and returns it and its address.
func startFake(t testing.TB, o fakeupstream.Options) (*fakeupstream.Server, string) {
	t.Helper()
	fake := fakeupstream.New(o)
	addr, err := fake.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Close() })
	return fake, addr
}

// queuedHopRouter is node "t" owning tenant "acme" (key "k", concurrency 1,
// interactive, a 5 s wait) on the upstream at upAddr, in a view with a
// peer "p" that is not listening; tune changes its config first.
func queuedHopRouter(t *testing.T, upAddr string, tune func(*config.Config)) (*Router, *ring.Ring) {
	t.Helper()
	cfg := config.Default()
	cfg.Node.Name = "t"
	cfg.Cluster.Secret = bytes.Repeat([]byte{7}, 32)
	cfg.Upstreams = []config.Upstream{{Name: "up", Kind: config.KindOpenAI, BaseURL: "http://" + upAddr, Models: []string{"gpt-4o"}}}
	cfg.Queue.InteractiveWait = 5 * time.Second
	cfg.Tenants = []config.Tenant{{Name: "acme", Keys: []string{"k"}, RPM: 100, TPM: 1 << 30, Concurrency: 1,
		Priority: config.PriorityInteractive}}
	if tune != nil {
		tune(cfg)
	}
	r, err := New(Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	rg := ring.New(1, []string{"t"})
	r.SetView(View{Ring: rg, Members: []Member{
		{Name: "p", Addr: deadAddr(t), State: "active"}, {Name: "t", Addr: "127.0.0.1:1", State: "active"}}})
	return r, rg
}

// hopBehindCall serves r, starts a client call for "acme" (the upstream is
// slow: it runs until the test speeds it up), then sends a hop from "p"
// (its hops-th) that waits in the tenant's line behind it. first gets the
// call's status, done the hop's end; resp is the hop's answer.
func hopBehindCall(t *testing.T, r *Router, rg *ring.Ring, hops int) (first <-chan int, done <-chan error, resp *fasthttp.Response) {
	t.Helper()
	tn := r.state.Load().ByName["acme"]
	url := "http://" + serveRouter(t, r) + "/v1/chat/completions"
	body := []byte(`{"model":"gpt-4o","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	firstCh := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			firstCh <- 0
			return
		}
		resp.Body.Close()
		firstCh <- resp.StatusCode
	}()
	if !poll(2*time.Second, func() bool { return tn.Core().Lim.Usage(r.clock()).InFlight == 1 }) {
		t.Fatal("the first call is not running")
	}
	hop := fasthttp.AcquireRequest()
	t.Cleanup(func() { fasthttp.ReleaseRequest(hop) })
	hop.Header.SetMethod(fasthttp.MethodPost)
	hop.SetRequestURI(url)
	hop.Header.Set("Authorization", "Bearer k")
	hop.Header.SetContentType("application/json")
	hop.SetBody(body)
	r.hops.Sign(hop, "p", "t", rg.Version(), hops)
	resp = fasthttp.AcquireResponse()
	t.Cleanup(func() { fasthttp.ReleaseResponse(resp) })
	doneCh := make(chan error, 1)
	go func() { doneCh <- fasthttp.DoTimeout(hop, resp, 10*time.Second) }()
	if !poll(2*time.Second, func() bool { return tn.Core().Queue.Waiting() == 1 }) {
		t.Fatal("the hop is not waiting in the tenant's line")
	}
	return firstCh, doneCh, resp
}

// setClock is a clock a test sets (Store, Add) for the windows it
// counts in, while its waits and timers run on the wall clock: these
// tests move windows, not wait budgets.
type setClock struct {
	clockwork.Clock
	atomic.Int64 // Unix ns
}

func newSetClock(ns int64) *setClock {
	c := &setClock{Clock: clockwork.NewRealClock()}
	c.Store(ns)
	return c
}

func (c *setClock) Now() time.Time                  { return time.Unix(0, c.Load()) }
func (c *setClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *setClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// stoppedClock reads always the same time, at the cost of the wall clock's
// read or less: a benchmark's clock.
type stoppedClock struct {
	clockwork.Clock
	at time.Time
}

func (c stoppedClock) Now() time.Time { return c.at }
