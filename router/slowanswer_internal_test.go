package router

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// A client that stops reading a large JSON answer is cut after
// clientWriteIdle without progress, as a stream's is. It was never cut
// (the server has no WriteTimeout: it would cut streams): the connection's
// goroutine and the whole answer (up to 64 MiB) stayed for as long as the
// client kept the socket open (a reviewer's).
func TestStalledJSONReaderCut(t *testing.T) {
	r := streamRouter(t, 2_000_000, 200*time.Millisecond) // ~8 MB JSON answer
	addr := serveRouter(t, r)
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close() // before the server's Shutdown in Cleanup: unblocks its write
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	head := make([]byte, 64)
	if _, err := io.ReadFull(conn, head); err != nil || !bytes.HasPrefix(head, []byte("HTTP/1.1 200")) {
		t.Fatalf("answer did not start: %q %v", head, err)
	}
	// The client stops reading for 15 times the stream write idle.
	time.Sleep(15 * r.clientWriteIdle)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, io.LimitReader(conn, 7_000_000))
	t.Logf("after a %v stall the client could still read %d more bytes (err %v)", 15*r.clientWriteIdle, n, err)
	if n >= 7_000_000 {
		t.Fatalf("a client that stopped reading a JSON answer for %v was not cut (stream writes are cut after %v): "+
			"the server kept the answer and its goroutine waiting on it", 15*r.clientWriteIdle, r.clientWriteIdle)
	}
}

// A slow client that reads on gets the whole large answer, and its
// connection serves its next request (the write deadline is cleared).
func TestSlowJSONReaderServedWhole(t *testing.T) {
	// Linux wakes a writer blocked on a full socket only once a good part
	// of its send buffer (megabytes on loopback) is free: the idle must
	// cover the time the reader takes to drain that much.
	r := streamRouter(t, 2_000_000, time.Second) // ~8 MB JSON answer
	addr := serveRouter(t, r)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	br := bufio.NewReader(conn)
	for i := range 2 {
		if _, err := conn.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		buf := make([]byte, 256<<10)
		var n int64
		for {
			k, err := io.ReadFull(resp.Body, buf)
			n += int64(k)
			if err != nil {
				break
			}
			time.Sleep(20 * time.Millisecond) // slow, but reading on
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || n != resp.ContentLength || n < 1<<20 {
			t.Fatalf("request %d: %d, %d of %d bytes read", i, resp.StatusCode, n, resp.ContentLength)
		}
		if i == 0 {
			time.Sleep(1500 * time.Millisecond) // past the last deadline set: cleared, or the next write fails
		}
	}
}
