package upstream

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
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

// burstProvider answers a call to /v1/burst once n of them wait, all at
// once, so that n connections go back to the pools within microseconds of
// each other; a call to /v1/drop is dropped, its connection closed
// unanswered. restart closes every connection it has accepted (its
// listener stays); closedByGateway counts the connections the gateway
// closed while idle.
func burstProvider(t *testing.T, n int) (addr string, restart func(), closedByGateway *atomic.Int32) {
	t.Helper()
	var (
		mu      sync.Mutex
		conns   []net.Conn
		waiting int
		all     = make(chan struct{})
	)
	closedByGateway = new(atomic.Int32)
	addr = keepAliveProvider{
		accepted: func(c net.Conn) {
			mu.Lock()
			defer mu.Unlock()
			conns = append(conns, c)
		},
		gone: func() { closedByGateway.Add(1) },
		serve: func(c net.Conn, req *http.Request, _ []byte) bool {
			switch req.URL.Path {
			case "/v1/drop":
				return false
			case "/v1/burst":
				mu.Lock()
				if waiting++; waiting == n {
					close(all)
				}
				mu.Unlock()
				<-all
			}
			_, err := io.WriteString(c, restartAnswer)
			return err == nil
		},
	}.start(t)
	return addr, func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
		conns = nil
	}, closedByGateway
}

// A provider that restarts closes every keep-alive connection both pools
// hold. A connection reused within staleCheckIdle of its last answer is
// not checked, so the first call after the restart fails (the known limit,
// TestKnownLimitProviderRestartRightAfterAnswer), but that failure has
// every idle connection of both pools checked before its next call: the
// calls after it go on new connections instead of each failing on one of
// its own (8 of 8 did; closing the failed pool's idle connections instead
// left one failure a pool, a reviewer's).
func TestProviderRestartFailsOneCallNotOnePerConnection(t *testing.T) {
	const n = 4
	p, restart, _ := afterBurst(t, n)
	restart() // the FINs are in the pools' sockets when it returns (loopback)
	var failed []error
	for range n {
		for _, call := range []func(*Provider, string) error{callWhole, callStreamWhole} {
			if err := call(p, "/v1/after"); err != nil {
				failed = append(failed, err)
			}
		}
	}
	if len(failed) > 1 {
		t.Fatalf("%d of %d calls after a provider restart failed, want at most the first (first: %v)", len(failed), 2*n, failed[0])
	}
	t.Logf("%d of %d calls after the restart failed", len(failed), 2*n)
}

// One call the provider drops (a worker crashed on it, a balancer reset
// its connection) has the idle connections checked, not closed: the
// healthy ones are kept (a reviewer's: closing them all cost every one a
// new dial, and a TLS handshake).
func TestProviderDroppedCallKeepsHealthyConnections(t *testing.T) {
	const n = 4
	p, _, closedByGateway := afterBurst(t, n)
	if err := callWhole(p, "/v1/drop"); err == nil {
		t.Fatal("the dropped call succeeded")
	}
	for range n {
		if err := callWhole(p, "/v1/after"); err != nil {
			t.Errorf("call after the dropped one: %v", err)
		}
		if err := callStreamWhole(p, "/v1/after"); err != nil {
			t.Errorf("stream call after the dropped one: %v", err)
		}
	}
	time.Sleep(20 * time.Millisecond) // the provider reads what the gateway closed
	if got := closedByGateway.Load(); got > 0 {
		t.Errorf("one dropped call closed %d healthy idle connections", got)
	}
}

// afterBurst is a provider whose pools hold 2n idle connections, released
// within microseconds of each other by n JSON and n stream calls answered
// together; restart and closedByGateway are burstProvider's.
func afterBurst(t *testing.T, n int) (p *Provider, restart func(), closedByGateway *atomic.Int32) {
	t.Helper()
	addr, restart, closedByGateway := burstProvider(t, 2*n)
	p, err := NewProvider(ProviderConfig{Name: "t", Kind: OpenAI, BaseURL: "http://" + addr, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range n {
		for _, call := range []func(*Provider, string) error{callWhole, callStreamWhole} {
			wg.Go(func() {
				if err := call(p, "/v1/burst"); err != nil {
					t.Errorf("burst call: %v", err)
				}
			})
		}
	}
	wg.Wait()
	return p, restart, closedByGateway
}

// callStreamWhole makes a call on the stream pool and reads its answer.
func callStreamWhole(p *Provider, path string) error {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	p.Prepare(req, []byte(path), []byte(`{}`), &fasthttp.RequestHeader{})
	if err := p.Do(req, resp, true); err != nil {
		return err
	}
	_, err := io.Copy(io.Discard, resp.BodyStream())
	return err
}

// A call dropped while another connection's answer and the provider's
// close wait unread (the provider restarted right after that answer): the
// answer read after the Raise, its connection is still checked before its
// next call, which goes on a new connection (a reviewer's: it was taken
// for checked by that read, and the next call failed, 10 times in 10).
func TestProviderAnswerReadAfterRaiseStillChecked(t *testing.T) {
	lastAnswer := strings.Repeat("x", 64<<10)
	addr := keepAliveProvider{serve: func(c net.Conn, req *http.Request, _ []byte) bool {
		switch req.URL.Path {
		case "/v1/drop":
			return false
		case "/v1/last": // longer than a read: most of it is read after the Raise
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s", len(lastAnswer), lastAnswer)
			return false // restarted right after this answer
		}
		_, err := io.WriteString(c, restartAnswer)
		return err == nil
	}}.start(t)
	p, err := NewProvider(ProviderConfig{Name: "t", Kind: OpenAI, BaseURL: "http://" + addr, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		p.Prepare(req, []byte("/v1/last"), []byte(`{}`), &fasthttp.RequestHeader{})
		if err := p.Do(req, resp, true); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // the answer's body and the close queued
		if err := callWhole(p, "/v1/drop"); err == nil {
			t.Fatal("the dropped call succeeded")
		}
		if _, err := io.Copy(io.Discard, resp.BodyStream()); err != nil {
			t.Fatal(err)
		}
		fasthttp.ReleaseResponse(resp) // its connection back to the pool
		fasthttp.ReleaseRequest(req)
		if err := callStreamWhole(p, "/v1/after"); err != nil {
			t.Fatalf("the call after: %v", err)
		}
	}
}

// A Suspicion raised again and again while calls go through both pools
// (run with -race): no call fails for it, whatever the interleaving of
// Raise with the connections' reads and writes (a reviewer's).
func TestProviderSuspicionRaisedUnderLoad(t *testing.T) {
	addr, _, _ := burstProvider(t, 1<<30)
	p, err := NewProvider(ProviderConfig{Name: "t", Kind: OpenAI, BaseURL: "http://" + addr, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				p.suspect.Raise()
				time.Sleep(50 * time.Microsecond)
			}
		}
	}()
	errs := make(chan error, 8*100*2)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if err := callWhole(p, "/v1/x"); err != nil {
					errs <- err
				}
				if err := callStreamWhole(p, "/v1/x"); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-done
	close(errs)
	n := 0
	for err := range errs {
		if n == 0 {
			t.Errorf("call failed: %v", err)
		}
		n++
	}
	t.Logf("%d failures of %d", n, 8*100*2)
}
