// Package closingpeer is test machinery: an HTTP peer on loopback that
// answers each connection's first request and then closes the connection
// without saying so (no Connection: close), as a provider restarting, a
// worker with a per-connection request budget or an HTTP/1.0-minded proxy
// does. It knows nothing of ringgate.
package closingpeer

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// Start serves until the test ends and returns the peer's address and a
// channel told of each close, so that a test can send its next request
// after it (one written before the close cannot be told from one the peer
// read and dropped).
func Start(tb testing.TB) (addr string, closed <-chan struct{}) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ln.Close() })
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
