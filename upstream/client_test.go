package upstream

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// A per-request timeout (DoTimeout) bounds the wait on a connection whose
// reads carry their own idle deadlines: a silent peer fails the call at the
// timeout, not at the (much longer) first-byte budget.
func TestIdleDialerKeepsCallerDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // reads the request, never answers
		}
	}()
	hc := &fasthttp.HostClient{Addr: ln.Addr().String(), Dial: IdleDialer(time.Minute, time.Minute, fasthttp.Dial)}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + ln.Addr().String() + "/")
	start := time.Now()
	err = hc.DoTimeout(req, resp, 200*time.Millisecond)
	took := time.Since(start)
	if !errors.Is(err, fasthttp.ErrTimeout) || took > 5*time.Second {
		t.Fatalf("DoTimeout(200ms) on a silent server: %v after %v, want a timeout", err, took)
	}
	t.Logf("timed out after %v", took)
}

// TestProviderAnswerPools: a JSON answer is read whole, and one past
// MaxAnswerBytes fails the call as unreachable; a stream's body is left to
// read as it comes; a silent provider times out in either pool.
func TestProviderAnswerPools(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.Path()) {
		case "/v1/big":
			ctx.SetBody(make([]byte, 4000))
		case "/v1/silent":
			time.Sleep(800 * time.Millisecond)
		default:
			ctx.SetBodyString(`{"ok":true}`)
		}
	}}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Shutdown() }()
	p, err := NewProvider(ProviderConfig{Name: "t", Kind: OpenAI, BaseURL: "http://" + ln.Addr().String(),
		Timeout: 200 * time.Millisecond, MaxAnswerBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	do := func(path string, stream bool) (*fasthttp.Response, error) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		p.Prepare(req, []byte(path), []byte(`{}`), &fasthttp.RequestHeader{})
		return resp, p.Do(req, resp, stream)
	}
	for _, stream := range []bool{false, true} {
		resp, err := do("/v1/small", stream)
		if err != nil || (resp.BodyStream() != nil) != stream {
			t.Errorf("stream=%v: err %v, body streamed %v", stream, err, resp.BodyStream() != nil)
		}
		if !stream && string(resp.Body()) != `{"ok":true}` {
			t.Errorf("JSON answer %q", resp.Body())
		}
		fasthttp.ReleaseResponse(resp)
		if _, err := do("/v1/silent", stream); !errors.Is(err, ErrTimeout) {
			t.Errorf("stream=%v: silent provider: %v, want ErrTimeout", stream, err)
		}
	}
	if _, err := do("/v1/big", false); !errors.Is(err, ErrUnreachable) {
		t.Errorf("answer past MaxAnswerBytes: %v, want ErrUnreachable", err)
	}
}

// TestProviderIdleCloseNotAnError: a provider that closes kept-alive
// connections after a short idle time (vLLM's uvicorn: 5 s, shorter than
// the pool's 30 s) does not turn the next call into an error: the closed
// connection is found before the request is written on it, and the call
// goes on a new one. Both pools; and a provider restarted (every pooled
// connection closed at once) the same.
func TestProviderIdleCloseNotAnError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			calls.Add(1)
			ctx.SetBodyString(`{"ok":true}`)
		},
		IdleTimeout: 50 * time.Millisecond,
	}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Shutdown() }()
	p, err := NewProvider(ProviderConfig{Name: "t", Kind: OpenAI, BaseURL: "http://" + ln.Addr().String(), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		stream := i%2 == 1
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		p.Prepare(req, []byte("/v1/chat/completions"), []byte(`{}`), &fasthttp.RequestHeader{})
		err := p.Do(req, resp, stream)
		if err == nil && stream {
			_, err = io.Copy(io.Discard, resp.BodyStream())
			_ = resp.CloseBodyStream()
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
		if err != nil {
			t.Fatalf("call %d (stream %v), after the provider closed the idle connection: %v", i, stream, err)
		}
		time.Sleep(200 * time.Millisecond) // past the provider's idle timeout
	}
	if n := calls.Load(); n != 6 {
		t.Fatalf("the provider saw %d calls, want 6 (none sent twice)", n)
	}
}

// TestProviderTimeoutBoundsWholeAnswer: a provider that sends its headers
// at once and then dribbles the body, each byte well within
// stream_idle_timeout, is cut at timeout when the answer is read whole (the
// answer to a request that did not ask for a stream: timeout is for the
// whole of it); a stream's body read as it comes is not (its reads wait
// stream_idle_timeout each).
func TestProviderTimeoutBoundsWholeAnswer(t *testing.T) {
	const bodyLen, gap = 20, 40 * time.Millisecond // 0.8 s for the body
	addr := keepAliveProvider{serve: func(c net.Conn, _ *http.Request, body []byte) bool {
		kind := "application/json"
		if bytes.Contains(body, []byte(`"stream":true`)) {
			kind = "text/event-stream"
		}
		if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", kind, bodyLen); err != nil {
			return false
		}
		for range bodyLen {
			time.Sleep(gap)
			if _, err := c.Write([]byte(" ")); err != nil {
				return false
			}
		}
		return false
	}}.start(t)
	p, err := NewProvider(ProviderConfig{Name: "t", Kind: OpenAI, BaseURL: "http://" + addr,
		Timeout: 300 * time.Millisecond, StreamIdle: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, stream := range []bool{false, true} {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		body := []byte(`{}`)
		if stream {
			body = []byte(`{"stream":true}`)
		}
		p.Prepare(req, []byte("/v1/chat/completions"), body, &fasthttp.RequestHeader{})
		start := time.Now()
		err := p.Do(req, resp, stream)
		n := 0
		if err == nil && stream {
			var b []byte
			b, err = io.ReadAll(resp.BodyStream())
			n = len(b)
			_ = resp.CloseBodyStream()
		}
		took := time.Since(start)
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
		switch {
		case !stream && !errors.Is(err, ErrTimeout):
			t.Fatalf("answer read whole, dribbled for %v: %v after %v, want ErrTimeout at the 300 ms timeout", bodyLen*gap, err, took)
		case stream && (err != nil || n != bodyLen):
			t.Fatalf("stream dribbled a byte every %v (idle timeout 1 s): %d bytes, %v after %v; want the whole body", gap, n, err, took)
		}
		t.Logf("stream %v: %v after %v", stream, err, took)
	}
}

// TestProviderPoolReusesRecentConnections: after a burst opened many
// connections, a steady load of a few clients is served on about as many,
// the most recently used, each reused before the stale check's idle time, so
// not checked; the burst's others idle out. Taken in turn (FIFO, fasthttp's
// default), every connection stayed in use and each call was checked (a
// syscall and a cold connection: 12 µs of CPU a call over the floor instead
// of 7 after a burst of 64).
func TestProviderPoolReusesRecentConnections(t *testing.T) {
	const burst, steady, calls = 32, 4, 400
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		seen     = map[string]bool{}
		inFlight atomic.Int64
		release  = make(chan struct{})
	)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/v1/burst" {
			// Held until the whole burst is in flight, each call on a
			// connection of its own.
			if inFlight.Add(1) == burst {
				close(release)
			}
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			}
		} else {
			mu.Lock()
			seen[ctx.RemoteAddr().String()] = true
			mu.Unlock()
		}
		ctx.SetBodyString(`{"ok":true}`)
	}}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Shutdown() }()
	p, err := NewProvider(ProviderConfig{Name: "t", Kind: OpenAI, BaseURL: "http://" + ln.Addr().String(), Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	call := func(path string) error { return callWhole(p, path) }
	run := func(workers, each int, path string) {
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for range workers {
			wg.Go(func() {
				for range each {
					if err := call(path); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	run(burst, 1, "/v1/burst")
	run(steady, calls/steady, "/v1/steady")
	mu.Lock()
	defer mu.Unlock()
	if len(seen) > 2*steady {
		t.Fatalf("%d clients' %d calls after a burst of %d went over %d connections, want at most %d: the pool takes its connections in turn", steady, calls, burst, len(seen), 2*steady)
	}
	t.Logf("%d calls of %d clients after a burst of %d: %d connections", calls, steady, burst, len(seen))
}

func TestIsHopHeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		hop  bool
	}{
		{"Connection", true}, {"keep-alive", true}, {"PROXY-CONNECTION", true}, {"Transfer-Encoding", true},
		{"te", true}, {"Trailer", true}, {"Upgrade", true}, {"Content-Length", true}, {"Content-Encoding", true},
		{"Date", true}, {"Server", true}, {"Set-Cookie", true}, {"Alt-Svc", true},
		{"X-Ratelimit-Limit-Requests", true}, {"x-ratelimit-", true}, {"x-RateLimit-Reset-Tokens", true},
		{"Content-Type", false}, {"X-Request-Id", true}, {"Openai-Processing-Ms", false}, {"Retry-After", false},
		{"", false}, {"T", false}, {"Tee", false}, {"x-ratelimit", false}, {"Connections", false},
		{"Transfer-Encodings", false}, {"Cache-Control", false}, {"x-ringgate-node", true}, {"X-Ringgate-Hop", false},
	} {
		if got := IsHopHeader([]byte(tc.name)); got != tc.hop {
			t.Errorf("IsHopHeader(%q) = %v, want %v", tc.name, got, tc.hop)
		}
	}
	for _, h := range hopHeaders {
		if !IsHopHeader(bytes.ToLower(h)) || !IsHopHeader(bytes.ToUpper(h)) {
			t.Errorf("%s: not a hop header in another case", h)
		}
	}
}

// keepAliveProvider listens on loopback until t ends and serves each
// connection's requests in turn: serve writes what it will for one (its
// body read) and says whether the connection goes on. accepted, if set, is
// told of each connection; gone, if set, of each one its client closed
// between requests.
type keepAliveProvider struct {
	tls      bool // https, with a certificate of its own
	accepted func(net.Conn)
	gone     func()
	serve    func(c net.Conn, req *http.Request, body []byte) (more bool)
}

func (kp keepAliveProvider) start(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	if kp.tls {
		ln = tls.NewListener(ln, testServerTLS(t))
	}
	conn := func(c net.Conn) {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				if err == io.EOF && kp.gone != nil {
					kp.gone()
				}
				return
			}
			body, _ := io.ReadAll(req.Body)
			if !kp.serve(c, req, body) {
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
			if kp.accepted != nil {
				kp.accepted(c)
			}
			go conn(c)
		}
	}()
	return ln.Addr().String()
}

// testServerTLS is a server TLS config with httptest's own certificate.
func testServerTLS(t *testing.T) *tls.Config {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	srv.StartTLS()
	cfg := srv.TLS.Clone()
	srv.Close()
	return cfg
}

// callWhole sends a call to path through p, its answer read whole.
func callWhole(p *Provider, path string) error {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	p.Prepare(req, []byte(path), []byte(`{}`), &fasthttp.RequestHeader{})
	return p.Do(req, resp, false)
}

// Prepare passes the client headers that carry meaning for the provider,
// whatever their case, the first of each when repeated and none that is
// empty, and nothing else: the provider's credentials replace the
// client's, and a client's anthropic-version replaces the configured one.
func TestPreparePassesClientHeaders(t *testing.T) {
	const client = "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n" +
		"authorization: Bearer sk-client\r\nx-api-key: sk-client\r\nopenai-organization: org-1\r\nOPENAI-PROJECT: proj-1\r\n" +
		"OpenAI-Beta: assistants=v2\r\nOpenAI-Beta: second\r\naccept: text/event-stream\r\nanthropic-beta: tools-1\r\n" +
		"cookie: a=1\r\nx-custom: c\r\nContent-Length: 2\r\n\r\n{}"
	for _, tc := range []struct {
		name    string
		kind    Kind
		version string // the client's anthropic-version, "" none
		want    map[string]string
	}{{
		name: "openai",
		kind: OpenAI,
		want: map[string]string{"Authorization": "Bearer sk-upstream", "X-Api-Key": "", "Openai-Organization": "org-1",
			"Openai-Project": "proj-1", "Openai-Beta": "assistants=v2", "Accept": "text/event-stream",
			"Accept-Encoding": "identity", "Anthropic-Beta": "", "Anthropic-Version": "", "Cookie": "", "X-Custom": ""},
	}, {
		name: "anthropic, the configured version",
		kind: Anthropic,
		want: map[string]string{"X-Api-Key": "sk-upstream", "Authorization": "", "Anthropic-Version": "2023-06-01",
			"Anthropic-Beta": "tools-1", "Accept": "text/event-stream", "Openai-Organization": "", "Openai-Beta": "",
			"Cookie": "", "X-Custom": ""},
	}, {
		name:    "anthropic, the client's version",
		kind:    Anthropic,
		version: "2024-01-01",
		want:    map[string]string{"X-Api-Key": "sk-upstream", "Anthropic-Version": "2024-01-01"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewProvider(ProviderConfig{Name: "up", Kind: tc.kind, BaseURL: "http://127.0.0.1:1/v1",
				APIKey: "sk-upstream", AnthropicVersion: "2023-06-01"})
			if err != nil {
				t.Fatal(err)
			}
			raw := client
			if tc.version != "" {
				raw = strings.Replace(raw, "cookie:", "ANTHROPIC-VERSION: "+tc.version+"\r\nanthropic-version: later\r\ncookie:", 1)
			}
			var in fasthttp.Request
			if err := in.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
				t.Fatal(err)
			}
			var out fasthttp.Request
			p.Prepare(&out, []byte("/v1/chat/completions"), in.Body(), &in.Header)
			for name, want := range tc.want {
				if got := string(out.Header.Peek(name)); got != want {
					t.Errorf("%s: %q, want %q", name, got, want)
				}
			}
			if got := out.Header.PeekAll("Openai-Beta"); tc.kind == OpenAI && len(got) != 1 {
				t.Errorf("Openai-Beta sent %d times, want once", len(got))
			}
		})
	}
}

// TestInterimAnswerThenHeaders (a reviewer's): timeout is the longest wait
// for the answer to start. A provider (or a proxy in front of it) that
// sends an interim 1xx answer at once (100 Continue, 103 Early Hints) and
// its real headers 600 ms later, within the 2 s timeout, failed a stream
// request at stream_idle_timeout (200 ms): fasthttp skips the 1xx within
// one Do, and idleConn gave the reads after it the idle budget. The JSON
// pool keeps the first read's deadline, so was right.
func TestInterimAnswerThenHeaders(t *testing.T) {
	for _, scheme := range []string{"http", "https"} {
		kp := keepAliveProvider{tls: scheme == "https", serve: func(c net.Conn, _ *http.Request, _ []byte) bool {
			if _, err := io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
				return false
			}
			time.Sleep(600 * time.Millisecond)
			body := "data: {}\n\ndata: [DONE]\n\n"
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			return false
		}}
		addr := kp.start(t)
		p, err := NewProvider(ProviderConfig{Name: "t", Kind: OpenAI, BaseURL: scheme + "://" + addr,
			Timeout: 2 * time.Second, StreamIdle: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		p.tlsConfig = &tls.Config{InsecureSkipVerify: true} // the test server's own certificate
		for _, stream := range []bool{false, true} {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			p.Prepare(req, []byte("/v1/chat/completions"), []byte(`{}`), &fasthttp.RequestHeader{})
			start := time.Now()
			err := p.Do(req, resp, stream)
			if err == nil && stream {
				_, err = io.Copy(io.Discard, resp.BodyStream())
				_ = resp.CloseBodyStream()
			}
			took := time.Since(start)
			fasthttp.ReleaseRequest(req)
			fasthttp.ReleaseResponse(resp)
			if err != nil {
				t.Errorf("%s, stream %v: 100 Continue at once, headers 600 ms later (timeout 2 s, stream idle 200 ms): %v after %v; want the answer", scheme, stream, err, took)
				continue
			}
			t.Logf("%s, stream %v: answered after %v", scheme, stream, took)
		}
	}
}

// TestHeadScan follows answers' heads cut into reads at every place: the
// final head ends at its blank line, after any interim ones.
func TestHeadScan(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		bodyAt       int // where the body starts; -1: the head does not end
	}{
		{"final", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: x\r\n\r\n", 52},
		{"interim then final", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\n\r\nbody", 84},
		{"bare LF", "HTTP/1.1 100 Continue\n\nHTTP/1.1 429 Too Many\nA: b\n\nbody", 51},
		{"interim alone", "HTTP/1.1 100 Continue\r\n\r\n", -1},
		// Empty lines before a status line and spaces after the version
		// are skipped, as fasthttp's parser does (a reviewer's).
		{"empty line after interim", "HTTP/1.1 100 Continue\r\n\r\n\r\nHTTP/1.1 200 OK\r\n\r\nx", 46},
		{"leading empty line", "\r\nHTTP/1.1 200 OK\r\n\r\nx", 21},
		{"two spaces after the version", "HTTP/1.1  100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\nx", 45},
		{"head cut", "HTTP/1.1 200 OK\r\nA: b\r\n", -1},
	} {
		if tc.bodyAt >= 0 && !strings.HasSuffix(tc.answer[:tc.bodyAt], "\n\n") && !strings.HasSuffix(tc.answer[:tc.bodyAt], "\r\n\r\n") {
			t.Fatalf("%s: bodyAt %d is not after a blank line", tc.name, tc.bodyAt)
		}
		for cut := 1; cut < len(tc.answer); cut++ {
			var h headScan
			end := -1
			for at, part := range [][]byte{[]byte(tc.answer[:cut]), []byte(tc.answer[cut:])} {
				if h.final(part) {
					if at == 0 {
						end = cut
					} else {
						end = len(tc.answer)
					}
					break
				}
			}
			want := -1 // the end of the read the head ends in
			switch {
			case tc.bodyAt < 0:
			case cut >= tc.bodyAt:
				want = cut
			default:
				want = len(tc.answer)
			}
			if end != want {
				t.Errorf("%s cut at %d: the head ended in the read ending at %d; want %d (the body at %d)", tc.name, cut, end, want, tc.bodyAt)
			}
		}
	}
}

// TestHeadScanRandomCuts (a reviewer's): random answers (interim heads,
// then a final one; CRLF or bare LF; HTTP/1.0; bodies that begin like a
// head or a blank line) cut into up to 6 reads: the head ends in the read
// holding its last byte, never before.
func TestHeadScanRandomCuts(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	for range 50000 {
		eol, ver := pick("\r\n", "\r\n", "\n"), pick("HTTP/1.1 ", "HTTP/1.1 ", "HTTP/1.0 ")
		head := func(status string) string {
			s := ver + status + eol
			for range rng.IntN(3) {
				s += pick("Content-Type: text/event-stream", "Link: </a>; rel=preload", "A: HTTP/1.1 100") + eol
			}
			return s + eol
		}
		var ans string
		for range rng.IntN(3) {
			ans += head(pick("100 Continue", "103 Early Hints", "102 Processing"))
		}
		ans += head(pick("200 OK", "429 Too Many Requests", "500 Internal", "204 No Content", "200"))
		end := len(ans)
		ans += pick("", "\r\n", "\n\n", "\r\n\r\nx", "HTTP/1.1 100 Continue\r\n\r\n", "data: x\n\n")
		cuts := []int{0, len(ans)}
		for range rng.IntN(5) {
			cuts = append(cuts, rng.IntN(len(ans)+1))
		}
		slices.Sort(cuts)
		var h headScan
		got, want := -1, -1
		for i := 1; i < len(cuts); i++ {
			if cuts[i] == cuts[i-1] {
				continue // a read of nothing is not scanned
			}
			if want < 0 && cuts[i] >= end {
				want = cuts[i]
			}
			if got < 0 && h.final([]byte(ans[cuts[i-1]:cuts[i]])) {
				got = cuts[i]
			}
		}
		if got != want {
			t.Fatalf("%q cut at %v: the head ended in the read ending at %d; want %d (it ends at %d)", ans, cuts, got, want, end)
		}
	}
}

// TestStreamIdleOverTLS (a reviewer's): under TLS the connection's reads
// are ciphertext, where no head can be followed; the first version
// scanned them, so a stream's reads kept the head's deadline: a stall was
// noticed at timeout, not stream_idle_timeout, and a stream that kept
// talking was cut at timeout. Each must behave as over plain HTTP.
func TestStreamIdleOverTLS(t *testing.T) {
	stream := func(srv *httptest.Server, timeout, idle time.Duration) (time.Duration, error) {
		t.Helper()
		p, err := NewProvider(ProviderConfig{Name: "t", Kind: OpenAI, BaseURL: srv.URL, Timeout: timeout, StreamIdle: idle})
		if err != nil {
			t.Fatal(err)
		}
		p.tlsConfig = &tls.Config{InsecureSkipVerify: true} // the test server's own certificate
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		p.Prepare(req, []byte("/v1/chat/completions"), []byte(`{}`), &fasthttp.RequestHeader{})
		start := time.Now()
		err = p.Do(req, resp, true)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.BodyStream())
			_ = resp.CloseBodyStream()
		}
		return time.Since(start), err
	}
	for _, tc := range []struct {
		name          string
		events        int           // sent an interval apart, after the headers and a first event
		interval      time.Duration //
		timeout, idle time.Duration
		wantErr       bool
	}{
		{"a stall past stream idle", 1, 600 * time.Millisecond, 1200 * time.Millisecond, 150 * time.Millisecond, true},
		{"a stream that keeps talking past timeout", 24, 50 * time.Millisecond, 600 * time.Millisecond, 300 * time.Millisecond, false},
	} {
		h := func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {}\n\n")
			w.(http.Flusher).Flush()
			for range tc.events {
				time.Sleep(tc.interval)
				_, _ = io.WriteString(w, "data: {}\n\n")
				w.(http.Flusher).Flush()
			}
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
		}
		for scheme, srv := range map[string]*httptest.Server{"http": httptest.NewServer(http.HandlerFunc(h)), "https": httptest.NewTLSServer(http.HandlerFunc(h))} {
			took, err := stream(srv, tc.timeout, tc.idle)
			srv.CloseClientConnections()
			srv.Close()
			if (err != nil) != tc.wantErr || (tc.wantErr && took > tc.interval*3/4) {
				t.Errorf("%s over %s (timeout %s, stream idle %s): %v after %s; want an error %v, within stream idle", tc.name, scheme, tc.timeout, tc.idle, err, took.Round(time.Millisecond), tc.wantErr)
			}
		}
	}
}

// TestTLSHandshakeWithinConnectTimeout: an https provider that takes the
// TCP connection and never answers the TLS handshake fails the call at
// connect_timeout (the handshake is part of connecting), not at timeout.
func TestTLSHandshakeWithinConnectTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() }) // held open, silent
		}
	}()
	const connect, timeout = 300 * time.Millisecond, 5 * time.Second
	p, err := NewProvider(ProviderConfig{Name: "t", Kind: OpenAI, BaseURL: "https://" + ln.Addr().String(),
		ConnectTimeout: connect, Timeout: timeout, StreamIdle: timeout})
	if err != nil {
		t.Fatal(err)
	}
	for _, stream := range []bool{false, true} {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		p.Prepare(req, []byte("/v1/chat/completions"), []byte(`{}`), &fasthttp.RequestHeader{})
		start := time.Now()
		err := p.Do(req, resp, stream)
		took := time.Since(start)
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
		if err == nil || took > timeout/2 {
			t.Errorf("stream %v: a silent TLS server: %v after %v; want an error within connect_timeout %v", stream, err, took.Round(time.Millisecond), connect)
		}
		t.Logf("stream %v: %v after %v", stream, err, took.Round(time.Millisecond))
	}
}
