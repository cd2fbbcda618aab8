package router

import (
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// A peer whose port refuses connections is known to have stopped from the
// first refusal (handoff.Config.StoppedSince: a new owner charges a dead
// owner's gap only up to then); a connection accepted since forgets it.
func TestPeerStoppedSinceRefused(t *testing.T) {
	var now int64 = 1_000
	p := &peers{connect: 100 * time.Millisecond, first: time.Second, idle: time.Second,
		clock: func() int64 { return now }, byAddr: map[string]*peer{}}
	addr := deadAddr(t)
	pc := p.get(addr)
	name := "d"
	pc.node.Store(&name)
	do := func() error {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://" + addr + "/")
		return pc.hc.Do(req, resp)
	}
	if _, ok := p.stoppedSince("d"); ok {
		t.Fatal("stopped before any connect")
	}
	if err := do(); err == nil {
		t.Fatal("a connect to a closed port succeeded")
	}
	now = 2_000
	_ = do() // refused again: the first refusal stands
	if at, ok := p.stoppedSince("d"); !ok || at != 1_000 {
		t.Fatalf("after two refusals: stopped since %d, %v; want 1000, true", at, ok)
	}
	if _, ok := p.stoppedSince("other"); ok {
		t.Fatal("another node reported stopped")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {}}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Shutdown()
	if err := do(); err != nil {
		t.Fatalf("a connect to the port listened on again: %v", err)
	}
	if at, ok := p.stoppedSince("d"); ok {
		t.Fatalf("stopped since %d after a connection was accepted", at)
	}
}
