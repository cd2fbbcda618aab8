package keepalive

import (
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/internal/closingpeer"
)

// TestClosedRightAfterAnswer: a peer that closes each connection right
// after its answer (no Connection: close: a restart, a per-connection
// request budget) leaves its FIN queued before the next request is
// written on a connection reused at once. Through a HostClient with
// RetryStale every request gets its answer, none sent twice. With the
// check skipped on a connection reused within 1 ms (found by a reviewer),
// 10 of 20 failed.
func TestClosedRightAfterAnswer(t *testing.T) {
	cases := []struct {
		name string
		opts Options
	}{
		{"plain", Options{}},
		{"tls (by the TCP state)", Options{TLS: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if (c.opts.TLS && !CanSeeClose) || (!c.opts.TLS && !CanPeek) {
				t.Skip("no check on this platform")
			}
			addr, closed := closingpeer.Start(t)
			hc := &fasthttp.HostClient{Addr: addr, Dial: func(addr string) (net.Conn, error) {
				raw, err := net.Dial("tcp", addr)
				if err != nil {
					return nil, err
				}
				return Checked(raw, c.opts), nil
			}}
			hc.RetryIfErr = RetryStale(hc)
			failed := 0
			for range 20 {
				req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				req.SetRequestURI("http://" + hc.Addr + "/")
				req.Header.SetMethod(fasthttp.MethodPost)
				req.SetBodyString("{}")
				if err := hc.DoTimeout(req, resp, 2*time.Second); err != nil {
					failed++
				}
				fasthttp.ReleaseRequest(req)
				fasthttp.ReleaseResponse(resp)
				select {
				case <-closed:
				case <-time.After(5 * time.Second):
					t.Fatal("the peer did not close the connection")
				}
			}
			if failed > 0 {
				t.Fatalf("%d of 20 back-to-back requests failed on connections closed before they were written", failed)
			}
		})
	}
}
