package upstream

// Tests that reproduce known limits (docs/limits.md): they fail by design
// and run only with RINGGATE_KNOWN_LIMITS=1.

import (
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/internal/knownlimit"
)

const restartAnswer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"

// restartingProvider answers /v1/first on one connection (A) and,
// 5 ms later, /v1/second on another (B); right after B's answer it
// "restarts": every connection it had is closed at once, without
// Connection: close, as a provider's graceful shutdown closes its idle
// keep-alive connections (uvicorn, Go's http.Server.Shutdown). The
// restarted provider accepts and answers new connections normally.
func restartingProvider(t *testing.T) string {
	t.Helper()
	var (
		mu            sync.Mutex
		old           []net.Conn
		restarted     bool
		firstAnswered = make(chan struct{})
		secondArrived = make(chan struct{})
	)
	return keepAliveProvider{
		accepted: func(c net.Conn) {
			mu.Lock()
			defer mu.Unlock()
			if !restarted {
				old = append(old, c)
			}
		},
		serve: func(c net.Conn, req *http.Request, _ []byte) bool {
			switch req.URL.Path {
			case "/v1/first":
				select {
				case <-secondArrived:
				case <-time.After(5 * time.Second):
				}
				_, _ = io.WriteString(c, restartAnswer)
				close(firstAnswered)
				return true
			case "/v1/second":
				close(secondArrived)
				<-firstAnswered
				time.Sleep(5 * time.Millisecond) // A idle past staleCheckIdle
				_, _ = io.WriteString(c, restartAnswer)
				mu.Lock()
				restarted = true
				for _, x := range old {
					_ = x.Close()
				}
				mu.Unlock()
				return false
			}
			_, err := io.WriteString(c, restartAnswer)
			return err == nil
		},
	}.start(t)
}

// restartRound: two calls open A and B (B answered last, 5 ms after
// A), the provider restarts right after B's answer, and the next call is
// sent at once. Returns that call's error.
func restartRound(t *testing.T, fifo bool) error {
	addr := restartingProvider(t)
	p, err := NewProvider(ProviderConfig{Name: "t", Kind: OpenAI, BaseURL: "http://" + addr, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if fifo {
		p.buffered.ConnPoolStrategy = fasthttp.FIFO // the control
	}
	call := func(path string) error { return callWhole(p, path) }
	errc := make(chan error, 1)
	go func() { errc <- call("/v1/first") }()
	if err := call("/v1/second"); err != nil {
		t.Fatalf("second call: %v", err)
	}
	third := call("/v1/third") // at once: B was read from microseconds ago
	if err := <-errc; err != nil {
		t.Fatalf("first call: %v", err)
	}
	return third
}

// TestKnownLimitProviderRestartRightAfterAnswer (a reviewer's): a
// connection reused within staleCheckIdle is not checked, and the pools
// take the one released last (LIFO), so under load almost none is. A
// provider that restarts (closing its idle keep-alive connections) right
// after an answer fails the next call on that connection (502
// upstream_unreachable), although it never saw the call. With spare idle
// connections a FIFO pool took the one idle longest, which the check looks
// at (the control); but FIFO kept every connection a burst opened in use,
// and without spare ones it reused them within the millisecond too.
// Checking every reuse costs 3.6 µs of CPU a call on this project's 2-core
// VM (docs/limits.md). The failure has the other idle connections checked
// before their next call, so it is the only one
// (TestProviderRestartFailsOneCallNotOnePerConnection).
func TestKnownLimitProviderRestartRightAfterAnswer(t *testing.T) {
	knownlimit.Only(t)
	const rounds = 5
	failed := 0
	var first error
	for range rounds {
		if err := restartRound(t, false); err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
	}
	fifoFailed := 0
	for range rounds {
		if err := restartRound(t, true); err != nil {
			fifoFailed++
		}
	}
	t.Logf("control, FIFO pool: %d of %d calls after the restart failed", fifoFailed, rounds)
	if failed > 0 {
		t.Fatalf("%d of %d calls sent right after a provider restart failed on a connection it had closed before the call was written (first: %v); FIFO: %d", failed, rounds, first, fifoFailed)
	}
}
