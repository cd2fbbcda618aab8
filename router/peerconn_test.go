package router

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// A kept-alive peer connection the peer has closed is caught before the next
// request is written on it; one the peer keeps open is written to as usual.
func TestCheckedConnStale(t *testing.T) {
	if !canPeek {
		t.Skip("no non-blocking peek on this platform")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 4)
	go func() {
		for {
			s, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer s.Close()
				buf := make([]byte, 64)
				n, _ := s.Read(buf) // the first request
				got <- append([]byte(nil), buf[:n]...)
				_, _ = s.Write([]byte("answer"))
				if string(buf[:n]) == "close after" {
					return // the peer closes the idle connection
				}
				_ = s.SetReadDeadline(time.Now().Add(2 * time.Second))
				if n, _ = s.Read(buf); n > 0 { // a second request, if any
					got <- append([]byte(nil), buf[:n]...)
				}
			}()
		}
	}()
	roundTrip := func(c net.Conn, req string) {
		t.Helper()
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatalf("write %q: %v", req, err)
		}
		buf := make([]byte, 6)
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatalf("read the answer to %q: %v", req, err)
		}
		<-got
	}

	// The peer closed it after answering: the next write fails with
	// errStaleConn and nothing reaches the peer.
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := newCheckedConn(raw)
	defer c.Close()
	roundTrip(c, "close after")
	time.Sleep(50 * time.Millisecond) // the FIN arrives
	if n, err := c.Write([]byte("second")); !errors.Is(err, errStaleConn) || n != 0 {
		t.Fatalf("write on a connection the peer closed: %d, %v; want 0, errStaleConn", n, err)
	}

	// The peer keeps it open: the second request goes through.
	raw2, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c2 := newCheckedConn(raw2)
	defer c2.Close()
	roundTrip(c2, "keep open")
	if _, err := c2.Write([]byte("second")); err != nil {
		t.Fatalf("write on a live kept-alive connection: %v", err)
	}
	select {
	case b := <-got:
		if string(b) != "second" {
			t.Fatalf("peer got %q, want the second request", b)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the second request did not reach the peer")
	}
}
