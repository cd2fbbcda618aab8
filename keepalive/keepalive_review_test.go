package keepalive

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestReviewClosedRightAfterAnswer: a peer that closes each connection
// right after its answer (no Connection: close) leaves its FIN queued
// before the next request is written on a connection reused at once. The
// check catches it when it runs; under MinIdle (the provider pools' 1 ms) a
// connection reused sooner is not checked and the request fails.
func TestReviewClosedRightAfterAnswer(t *testing.T) {
	if !CanPeek {
		t.Skip("no peek on this platform")
	}
	cases := []struct {
		name string
		opts Options
	}{
		{"always checked (peers)", Options{}},
		{"MinIdle 1ms (providers)", Options{MinIdle: time.Millisecond}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					s, err := ln.Accept()
					if err != nil {
						return
					}
					go func() {
						defer s.Close()
						_ = s.SetDeadline(time.Now().Add(5 * time.Second))
						req, err := http.ReadRequest(bufio.NewReader(s))
						if err != nil {
							return
						}
						_, _ = io.Copy(io.Discard, req.Body)
						_, _ = io.WriteString(s, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
					}()
				}
			}()
			hc := &fasthttp.HostClient{Addr: ln.Addr().String(), Dial: func(addr string) (net.Conn, error) {
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
			}
			if failed > 0 {
				t.Fatalf("%d of 20 back-to-back requests failed on connections closed before they were written", failed)
			}
		})
	}
}
