package router_test

// The edge against slow and malformed clients: headers and bodies dripped
// over raw TCP connections are cut with a 408 (node.header_timeout,
// node.body_min_rate, node.body_grace), a steady large body is not, idle
// keep-alive connections are not, and a body that is not UTF-8 is refused
// before it reaches the provider.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/internal/knownlimit"
	"github.com/ringgate/ringgate/node"
)

// newEdgeEnv is newEnv with the node restarted on a config changed by tune
// (the slow-client keys are read when the server is built).
func newEdgeEnv(t *testing.T, ec envConfig, tune func(*config.Config)) *env {
	t.Helper()
	e := newEnv(t, ec)
	cfg := *e.cfg
	cfg.Node.Name += "-edge"
	cfg.Node.Listen = "127.0.0.1:0"
	tune(&cfg)
	cfg.Node.Gossip = "127.0.0.1:0"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config does not validate: %v", err)
	}
	cfg.Node.Gossip = ""
	nd, err := node.Start(&cfg, node.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	_ = e.node.Close()
	e.node, e.cfg, e.base = nd, &cfg, "http://"+nd.Addr()
	t.Cleanup(func() { _ = nd.Close() })
	return e
}

// rawHead is the head of a POST with a tenant key; length < 0 sends the
// body chunked.
func rawHead(addr, path, key string, length int) string {
	framing := fmt.Sprintf("Content-Length: %d", length)
	if length < 0 {
		framing = "Transfer-Encoding: chunked"
	}
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n%s\r\n\r\n",
		path, addr, key, framing)
}

// drip writes b one byte every interval until it is all written, the
// connection fails (the server cut it) or stop closes. It reports how many
// bytes it wrote.
func drip(conn net.Conn, b []byte, interval time.Duration, stop <-chan struct{}) int {
	for i := range b {
		if _, err := conn.Write(b[i : i+1]); err != nil {
			return i
		}
		select {
		case <-stop:
			return i + 1
		case <-time.After(interval):
		}
	}
	return len(b)
}

// cut is what a slow client saw: the answer (if any) and when it came.
type cut struct {
	reply  reply
	err    error         // reading the answer failed
	after  time.Duration // from start to the answer (or the failure)
	close  bool          // the answer said Connection: close
	closed bool          // the connection was closed after the answer
}

// awaitCut reads one answer on conn and then checks the server closed the
// connection, all within limit.
func awaitCut(conn net.Conn, start time.Time, limit time.Duration) cut {
	_ = conn.SetReadDeadline(start.Add(limit))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	c := cut{after: time.Since(start), err: err}
	if err != nil {
		return c
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.err = err
		return c
	}
	c.reply = reply{status: resp.StatusCode, header: resp.Header, body: body}
	c.close = resp.Close // net/http moves Connection: close here from the header
	// Nothing more may come: the server closes the connection.
	var one [1]byte
	_, err = br.Read(one[:])
	c.closed = err != nil && !isTimeout(err)
	return c
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// check408 checks a slow client got a 408 in OpenAI's shape, its connection
// closed, within [lo, hi] of the start.
func check408(t *testing.T, c cut, lo, hi time.Duration) {
	t.Helper()
	if c.err != nil {
		t.Fatalf("no answer after %s: %v (want a 408 within %s)", c.after.Round(time.Millisecond), c.err, hi)
	}
	if c.reply.status != http.StatusRequestTimeout {
		t.Fatalf("after %s: got %s, want 408", c.after.Round(time.Millisecond), c.reply)
	}
	checkErrorShape(t, c.reply, "request_timeout")
	if !c.close {
		t.Errorf("408 without Connection: close (headers %v)", c.reply.header)
	}
	if !c.closed {
		t.Error("connection still open after the 408")
	}
	if c.after < lo || c.after > hi {
		t.Errorf("cut after %s, want within [%s, %s]", c.after.Round(time.Millisecond), lo, hi)
	}
}

// TestKnownLimitBareLFHeadersWait: a request whose header lines end in a
// bare LF (RFC 9112 lets a server refuse them) is answered once
// header_timeout has passed, with a 408, not at once with a 400: fasthttp
// waits for the CRLF CRLF that ends a header block.
func TestKnownLimitBareLFHeadersWait(t *testing.T) {
	knownlimit.Only(t)
	const headerTimeout = 2 * time.Second
	e := newEdgeEnv(t, envConfig{tenants: []config.Tenant{tenantCfg("acme", 1000, 1_000_000, 10)}},
		func(c *config.Config) { c.Node.HeaderTimeout = headerTimeout })
	body := chatBody(openAIModel, 8, false, false)
	head := strings.ReplaceAll(rawHead(e.node.Addr(), "/v1/chat/completions", keyOf("acme"), len(body)), "\r\n", "\n")
	start := time.Now()
	conn, err := net.DialTimeout("tcp", e.node.Addr(), clientTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(append([]byte(head), body...)); err != nil {
		t.Fatal(err)
	}
	c := awaitCut(conn, start, clientTimeout)
	if c.err != nil || c.reply.status != http.StatusBadRequest || c.after > headerTimeout/2 {
		t.Fatalf("bare-LF headers: %s after %s (%v), want a 400 at once", c.reply, c.after.Round(time.Millisecond), c.err)
	}
}

// A client that drips its headers at 10 bytes/s is cut with a 408 once
// header_timeout has passed, not after fasthttp's 30 s: on a new connection
// and on a keep-alive one (from the first byte of its next request).
func TestE2ESlowHeadersCut(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of waiting: not in -short")
	}
	t.Parallel()
	const headerTimeout = 300 * time.Millisecond
	e := newEdgeEnv(t, envConfig{tenants: []config.Tenant{tenantCfg("acme", 1000, 1_000_000, 10)}},
		func(c *config.Config) { c.Node.HeaderTimeout = headerTimeout })
	body := chatBody(openAIModel, 8, false, false)
	head := []byte(rawHead(e.node.Addr(), "/v1/chat/completions", keyOf("acme"), len(body)))

	t.Run("new connection", func(t *testing.T) {
		// Every start is taken before the server can arm its deadline, so
		// the cut can never come before start + the budget.
		start := time.Now()
		conn, err := net.DialTimeout("tcp", e.node.Addr(), clientTimeout)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		stop := make(chan struct{})
		sent := make(chan int, 1)
		go func() { sent <- drip(conn, head, 100*time.Millisecond, stop) }()
		c := awaitCut(conn, start, clientTimeout)
		close(stop)
		n := <-sent
		t.Logf("headers dripped at 10 B/s: cut after %s, %d of %d header bytes sent, answer %d",
			c.after.Round(time.Millisecond), n, len(head), c.reply.status)
		check408(t, c, headerTimeout, 5*time.Second)
	})

	t.Run("keep-alive connection", func(t *testing.T) {
		conn, err := net.DialTimeout("tcp", e.node.Addr(), clientTimeout)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(clientTimeout))
		if _, err := conn.Write(append(append([]byte(nil), head...), body...)); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("first request: status %d, close %v", resp.StatusCode, resp.Close)
		}
		_ = conn.SetDeadline(time.Time{})
		// Idle longer than header_timeout first: idle_timeout governs that.
		time.Sleep(3 * headerTimeout)
		start := time.Now()
		stop := make(chan struct{})
		sent := make(chan int, 1)
		go func() { sent <- drip(conn, head, 100*time.Millisecond, stop) }()
		c := awaitCut(&bufConn{Conn: conn, r: br}, start, clientTimeout)
		close(stop)
		n := <-sent
		t.Logf("keep-alive, next headers dripped at 10 B/s: cut after %s, %d of %d header bytes sent",
			c.after.Round(time.Millisecond), n, len(head))
		// The first byte went out at start; the deadline runs from its arrival.
		check408(t, c, headerTimeout, 5*time.Second)
	})
	if n := len(e.fake.Records()); n != 1 {
		t.Errorf("fake upstream got %d requests, want 1 (the keep-alive connection's first)", n)
	}
}

// bufConn reads through a bufio.Reader already holding the connection's
// bytes.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// A client that drips its body at 2 bytes/s is cut with a 408 once
// body_grace + length/body_min_rate has passed (a chunked body:
// max_body_bytes at that rate); nothing reaches the provider and nothing is
// charged.
func TestE2ESlowBodyCut(t *testing.T) {
	t.Parallel()
	const (
		headerTimeout = 300 * time.Millisecond
		grace         = 500 * time.Millisecond
		minRate       = 100 // bytes/s
		maxBody       = 250
	)
	e := newEdgeEnv(t, envConfig{
		maxBodyBytes: maxBody,
		tenants:      []config.Tenant{tenantCfg("acme", 1000, 1_000_000, 10)},
	}, func(c *config.Config) {
		c.Node.HeaderTimeout = headerTimeout
		c.Node.BodyGrace = grace
		c.Node.BodyMinRate = minRate
	})
	body := []byte(`{"model":"` + openAIModel + `","max_tokens":8,"messages":[{"role":"user","content":"` +
		strings.Repeat("slow ", 30) + `"}]}`)
	if len(body) > maxBody {
		t.Fatalf("test body of %d bytes over max_body_bytes %d", len(body), maxBody)
	}

	for _, tc := range []struct {
		name   string
		length int // -1: chunked
		budget time.Duration
	}{
		{"content-length", len(body), grace + time.Duration(len(body))*time.Second/minRate},
		{"chunked", -1, grace + maxBody*time.Second/minRate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.DialTimeout("tcp", e.node.Addr(), clientTimeout)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now() // the body's budget starts when the headers have arrived
			if _, err := io.WriteString(conn, rawHead(e.node.Addr(), "/v1/chat/completions", keyOf("acme"), tc.length)); err != nil {
				t.Fatal(err)
			}
			payload := body
			if tc.length < 0 {
				var b bytes.Buffer
				for _, c := range body {
					fmt.Fprintf(&b, "1\r\n%c\r\n", c)
				}
				payload = b.Bytes()
			}
			stop := make(chan struct{})
			sent := make(chan int, 1)
			go func() { sent <- drip(conn, payload, 500*time.Millisecond, stop) }()
			c := awaitCut(conn, start, clientTimeout)
			close(stop)
			n := <-sent
			t.Logf("body dripped at 2 B/s (%s): cut after %s (budget %s), %d of %d body bytes sent",
				tc.name, c.after.Round(time.Millisecond), tc.budget, n, len(payload))
			check408(t, c, tc.budget, tc.budget+4*time.Second)
		})
	}
	t.Cleanup(func() {
		if n := len(e.fake.Records()); n != 0 {
			t.Errorf("%d cut requests reached the upstream", n)
		}
		if v, err := e.tenant("acme"); err != nil || v.Requests.Used != 0 || v.InFlight.Used != 0 {
			t.Errorf("cut requests were charged: %+v (%v)", v, err)
		}
	})
}

// steadyReader yields b in pieces of size every interval.
type steadyReader struct {
	b        []byte
	size     int
	interval time.Duration
	started  bool
}

func (r *steadyReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	if r.started {
		time.Sleep(r.interval)
	}
	r.started = true
	n := copy(p[:min(len(p), r.size)], r.b)
	r.b = r.b[n:]
	return n, nil
}

// A large body sent at a steady rate above body_min_rate passes, however
// much longer than header_timeout and body_grace it takes.
func TestE2ELargeBodySteadyRate(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of load")
	}
	t.Parallel()
	const (
		headerTimeout = 300 * time.Millisecond
		grace         = 500 * time.Millisecond
		minRate       = 64 << 10 // 64 KiB/s: 256 KiB may take 4.5 s
	)
	e := newEdgeEnv(t, envConfig{
		maxBodyBytes: 1 << 20,
		tenants:      []config.Tenant{tenantCfg("acme", 1000, 100_000_000, 10)},
		fake:         fakeupstream.Options{CompletionMin: 1, CompletionMax: 4},
	}, func(c *config.Config) {
		c.Node.HeaderTimeout = headerTimeout
		c.Node.BodyGrace = grace
		c.Node.BodyMinRate = minRate
	})
	words := strings.Repeat("steady body ", (256<<10)/12)
	body := []byte(`{"model":"` + openAIModel + `","max_tokens":4,"messages":[{"role":"user","content":"` + words + `"}]}`)
	// 8 KiB every 50 ms: about 160 KiB/s, 1.6 s in all.
	req := e.request(t.Context(), http.MethodPost, "/v1/chat/completions", keyOf("acme"), nil, nil)
	req.Header.Set("Content-Type", "application/json")
	req.Body = io.NopCloser(&steadyReader{b: body, size: 8 << 10, interval: 50 * time.Millisecond})
	req.ContentLength = int64(len(body))
	start := time.Now()
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	t.Logf("%d KiB body at ~160 KiB/s: %d after %s", len(body)>>10, resp.StatusCode, took.Round(time.Millisecond))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("got %d %s", resp.StatusCode, truncate(string(b), 300))
	}
	if took < 2*headerTimeout+grace {
		t.Errorf("the body took only %s: the test must outlast header_timeout and body_grace", took)
	}
	recs := e.waitRecords(1)
	if got := len(recs[0].Body); got != len(body) {
		t.Errorf("upstream got a %d-byte body, want the whole %d bytes", got, len(body))
	}
}

// An idle keep-alive connection is governed by the idle timeout, not cut
// by header_timeout.
func TestE2EIdleKeepAliveOutlastsHeaderTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of load")
	}
	t.Parallel()
	const headerTimeout = 300 * time.Millisecond
	e := newEdgeEnv(t, envConfig{tenants: []config.Tenant{tenantCfg("acme", 1000, 1_000_000, 10)}},
		func(c *config.Config) { c.Node.HeaderTimeout = headerTimeout })
	body := chatBody(openAIModel, 8, false, false)
	msg := append([]byte(rawHead(e.node.Addr(), "/v1/chat/completions", keyOf("acme"), len(body))), body...)
	conn, err := net.DialTimeout("tcp", e.node.Addr(), clientTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	for i := range 3 {
		if i > 0 {
			time.Sleep(4 * headerTimeout)
		}
		_ = conn.SetDeadline(time.Now().Add(clientTimeout))
		if _, err := conn.Write(msg); err != nil {
			t.Fatalf("request %d on the kept-alive connection: %v", i+1, err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d after %s idle: %v", i+1, 4*headerTimeout, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("request %d: status %d, close %v", i+1, resp.StatusCode, resp.Close)
		}
	}
}

// A JSON body with invalid UTF-8 in a string value gets a 400 in OpenAI's
// shape; nothing reaches the provider and nothing is charged.
func TestE2EInvalidUTF8(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{tenants: []config.Tenant{tenantCfg("acme", 1000, 1_000_000, 10)}})
	key := keyOf("acme")
	for _, tc := range []struct{ name, path, body string }{
		{"chat content", "/v1/chat/completions",
			`{"model":"` + openAIModel + `","messages":[{"role":"user","content":"caf` + "\xe9" + ` au lait"}]}`},
		{"chat model", "/v1/chat/completions",
			`{"model":"` + openAIModel + "\xff" + `","messages":[{"role":"user","content":"hi"}]}`},
		{"chat stream, surrogate", "/v1/chat/completions",
			`{"model":"` + openAIModel + `","stream":true,"messages":[{"role":"user","content":"` + "\xed\xa0\x80" + `"}]}`},
		{"messages system", "/v1/messages",
			`{"model":"` + anthropicModel + `","max_tokens":8,"system":"` + "\xc3\x28" + `","messages":[{"role":"user","content":"hi"}]}`},
		{"embeddings input", "/v1/embeddings",
			`{"model":"` + openAIModel + `","input":["ok","` + "\x80\x80" + `"]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.post(tc.path, key, []byte(tc.body), nil)
			if r.status != http.StatusBadRequest {
				t.Fatalf("got %s, want 400", r)
			}
			er := checkErrorShape(t, r, "invalid_json")
			if er["type"] != "invalid_request_error" || !strings.Contains(fmt.Sprint(er["message"]), "UTF-8") {
				t.Errorf("error %v: want type invalid_request_error and a message naming UTF-8", er)
			}
			e.checkRateHeaders(r)
		})
	}
	if n := len(e.fake.Records()); n != 0 {
		t.Errorf("%d bodies with invalid UTF-8 reached the upstream", n)
	}
	if v, err := e.tenant("acme"); err != nil || v.Requests.Used != 0 || v.Tokens.Used != 0 || v.InFlight.Used != 0 {
		t.Errorf("refused requests were charged: %+v (%v)", v, err)
	}
	// A valid body still passes.
	if r := e.post("/v1/chat/completions", key, chatBody(openAIModel, 8, false, false), nil); r.status != http.StatusOK {
		t.Fatalf("valid body after the refusals: %s", r)
	}
}
