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
// worker with a request budget, an HTTP/1.0-minded proxy. Each close is
// told on closed, so that a test can send its next call after it, within
// microseconds (a call written before the close cannot be told from one
// the provider read and dropped, and fails).
func closeAfterAnswer(t *testing.T) (addr string, closed <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	done := make(chan struct{}, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close(); done <- struct{}{} }()
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
	return ln.Addr().String(), done
}

// TestProviderClosedRightAfterAnswer: calls one after another on
// connections the provider closed right after answering (a restart, a
// per-connection request budget). Each closed connection is found before
// the next call is written on it and the call goes on a new one. A
// connection reused within staleCheckIdle is not checked (a busy node
// saves the syscall), so each next call here comes just past it; sent at
// once, each would fail as 502 upstream_unreachable (found by a reviewer).
func TestProviderClosedRightAfterAnswer(t *testing.T) {
	addr, closed := closeAfterAnswer(t)
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
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatal("the provider did not close the connection")
		}
		time.Sleep(staleCheckIdle + time.Millisecond) // pacing: past the idle the check waits for
	}
	if failed > 0 {
		t.Fatalf("%d of 20 back-to-back calls failed on a connection the provider had closed before the call was written (first: %v)", failed, first)
	}
}
