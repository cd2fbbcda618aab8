package upstream

import (
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/internal/closingpeer"
)

// TestProviderClosedRightAfterAnswer: calls one after another on
// connections the provider closed right after answering (a restart, a
// per-connection request budget). Each closed connection is found before
// the next call is written on it and the call goes on a new one. A
// connection reused within staleCheckIdle is not checked (a busy node
// saves the syscall), so each next call here comes just past it; sent at
// once, each would fail as 502 upstream_unreachable (found by a reviewer).
func TestProviderClosedRightAfterAnswer(t *testing.T) {
	addr, closed := closingpeer.Start(t)
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
