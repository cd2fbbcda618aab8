package upstream

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// A per-request timeout (DoTimeout) bounds the wait on a connection whose
// reads carry their own idle deadlines: a silent peer fails the call at the
// timeout, not at the (much longer) first-byte budget.
func TestIdleDialerKeepsCallerDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // reads the request, never answers
		}
	}()
	hc := &fasthttp.HostClient{Addr: ln.Addr().String(), Dial: IdleDialer(time.Minute, time.Minute, fasthttp.Dial)}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + ln.Addr().String() + "/")
	start := time.Now()
	err = hc.DoTimeout(req, resp, 200*time.Millisecond)
	took := time.Since(start)
	if !errors.Is(err, fasthttp.ErrTimeout) || took > 5*time.Second {
		t.Fatalf("DoTimeout(200ms) on a silent server: %v after %v, want a timeout", err, took)
	}
	t.Logf("timed out after %v", took)
}
