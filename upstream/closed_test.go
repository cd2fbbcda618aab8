package upstream

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
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

// burstProvider answers each call once n calls wait, all at once, so that
// n connections go back to the pool within microseconds of each other;
// restart closes every connection it has accepted (its listener stays).
func burstProvider(t *testing.T, n int) (addr string, restart func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var (
		mu      sync.Mutex
		conns   []net.Conn
		waiting int
		all     = make(chan struct{})
	)
	serve := func(c net.Conn) {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			if req.URL.Path == "/v1/burst" {
				mu.Lock()
				if waiting++; waiting == n {
					close(all)
				}
				mu.Unlock()
				<-all
			}
			if _, err := io.WriteString(c, restartAnswer); err != nil {
				return
			}
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go serve(c)
		}
	}()
	return ln.Addr().String(), func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
		conns = nil
	}
}

// A provider that restarts closes every keep-alive connection a pool
// holds. A connection reused within staleCheckIdle of its last answer is
// not checked, so the first call after the restart fails (the known limit,
// TestKnownLimitProviderRestartRightAfterAnswer), but that failure closes
// the pool's other idle connections: the calls after it dial afresh
// instead of each failing on a connection of its own (4 of 4 did).
func TestProviderRestartFailsOneCallNotOnePerConnection(t *testing.T) {
	const n = 4
	addr, restart := burstProvider(t, n)
	p, err := NewProvider(ProviderConfig{Name: "t", Kind: OpenAI, BaseURL: "http://" + addr, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if err := callWhole(p, "/v1/burst"); err != nil {
				t.Errorf("burst call: %v", err)
			}
		})
	}
	wg.Wait()
	restart() // the FINs are in the pool's sockets when it returns (loopback)
	var failed []error
	for range n {
		if err := callWhole(p, "/v1/after"); err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) > 1 {
		t.Fatalf("%d of %d calls after a provider restart failed, want at most the first (first: %v)", len(failed), n, failed[0])
	}
	t.Logf("%d of %d calls after the restart failed", len(failed), n)
}
