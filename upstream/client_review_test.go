package upstream

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// closeAfterAnswer serves on a loopback port a provider that answers each
// connection's first request and then closes the connection without saying
// so (no Connection: close): a provider restarting (uvicorn's graceful
// shutdown closes its idle connections the moment their answer is out), a
// worker with a request budget, an HTTP/1.0-minded proxy. The FIN is on
// the gateway's socket microseconds after the answer.
func closeAfterAnswer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
			}()
		}
	}()
	return ln.Addr().String()
}

// TestReviewProviderClosedWithinMinIdle: calls back to back (a busy
// gateway reuses a connection at once) on connections the provider closed
// right after answering. The closed connection is detectable (its FIN is
// queued before the next call is written), but MinIdle (1 ms) skips the
// check on a connection reused sooner: the call is written on a dead
// connection and fails with 502 upstream_unreachable, where a retry on a
// new connection was safe.
func TestReviewProviderClosedWithinMinIdle(t *testing.T) {
	addr := closeAfterAnswer(t)
	p, err := NewProvider(ProviderConfig{Name: "t", Kind: OpenAI, BaseURL: "http://" + addr, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	var first error
	for i := range 20 {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		p.Prepare(req, []byte("/v1/chat/completions"), []byte(`{}`), &fasthttp.RequestHeader{})
		if err := p.Do(req, resp, false); err != nil {
			failed++
			if first == nil {
				first = err
				t.Logf("call %d: %v", i, err)
			}
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
	if failed > 0 {
		t.Fatalf("%d of 20 back-to-back calls failed on a connection the provider had closed before the call was written (first: %v)", failed, first)
	}
}
