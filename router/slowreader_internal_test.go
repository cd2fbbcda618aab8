package router

import (
	"bytes"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/ring"
)

// A client that asks for a long stream and stops reading is cut once its
// writes make no progress for clientWriteIdle: the call ends, its slot is
// freed and the provider's connection closed. It once held them for ever
// (and past slot_ttl its slot freed while the call went on: a tenant could
// run more streams than its concurrency).
func TestStalledStreamReaderCut(t *testing.T) {
	r := streamRouter(t, 400_000, 200*time.Millisecond)
	addr := serveRouter(t, r)

	// A small receive buffer: the server's writes block sooner.
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"model":"gpt-4o","stream":true,"max_tokens":400000,"messages":[{"role":"user","content":"hi"}]}`
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	head := make([]byte, 64)
	if _, err := conn.Read(head); err != nil || !bytes.HasPrefix(head, []byte("HTTP/1.1 200")) {
		t.Fatalf("stream did not start: %q %v", head, err)
	}
	// Then the client reads nothing more.
	lim := r.state.Load().ByName["acme"].Core().Lim
	start := time.Now()
	if !poll(10*time.Second, func() bool { return lim.Usage(r.clock()).InFlight == 0 }) {
		t.Fatalf("a client that stopped reading still holds its slot after %v (write idle %v)", time.Since(start).Round(time.Millisecond), r.clientWriteIdle)
	}
	t.Logf("slot freed %v after the client stopped reading", time.Since(start).Round(time.Millisecond))
}

// The deadline a stream moves on is cleared when it ends: the next request
// on the keep-alive connection, past clientWriteIdle, is answered.
func TestStreamDeadlineClearedForNextRequest(t *testing.T) {
	r := streamRouter(t, 5, 100*time.Millisecond)
	hc := &fasthttp.HostClient{Addr: serveRouter(t, r), MaxConns: 1}
	var dials atomic.Int32
	hc.Dial = func(addr string) (net.Conn, error) {
		dials.Add(1)
		return net.Dial("tcp", addr)
	}
	for i, stream := range []bool{true, false, true} {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + hc.Addr + "/v1/chat/completions")
		req.Header.SetMethod(fasthttp.MethodPost)
		req.Header.Set("Authorization", "Bearer k")
		req.SetBodyString(`{"model":"gpt-4o","stream":` + strconv.FormatBool(stream) + `,"messages":[{"role":"user","content":"hi"}]}`)
		if err := hc.DoTimeout(req, resp, 5*time.Second); err != nil || resp.StatusCode() != fasthttp.StatusOK {
			t.Fatalf("request %d (stream %v), after a stream on the connection: %v, status %d", i, stream, err, resp.StatusCode())
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
		time.Sleep(3 * r.clientWriteIdle)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("%d connections for 3 requests, want 1 (keep-alive)", n)
	}
}

// streamRouter is a standalone router in front of the fake provider, whose
// answers have completion tokens, for tenant "acme" (key "k", concurrency
// 2), its streams' clients cut after idle without progress.
func streamRouter(t *testing.T, completion int, idle time.Duration) *Router {
	t.Helper()
	_, upAddr := startFake(t, fakeupstream.Options{CompletionMin: completion, CompletionMax: completion})
	cfg := config.Default()
	cfg.Node.Name = "t"
	cfg.Upstreams = []config.Upstream{{Name: "up", Kind: config.KindOpenAI, BaseURL: "http://" + upAddr, Models: []string{"gpt-4o"}}}
	cfg.Tenants = []config.Tenant{{Name: "acme", Keys: []string{"k"}, RPM: 100, TPM: 1 << 40, Concurrency: 2}}
	r, err := New(Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	r.clientWriteIdle = idle
	r.SetView(View{Ring: ring.New(1, []string{"t"}), Members: []Member{{Name: "t", Addr: "127.0.0.1:1", State: "active"}}})
	return r
}
