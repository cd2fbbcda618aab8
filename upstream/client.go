package upstream

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/keepalive"
)

// Provider is one configured upstream: where it is, how to authenticate to
// it, and a pooled connection to it.
type Provider struct {
	Name   string
	Kind   Kind
	apiKey string
	prefix string // base URL path, without a trailing "/v1" (the request brings its own)
	scheme string
	host   string

	// The configured credentials and version as Prepare sets them, made
	// once.
	apiKeyBytes, bearerBytes, anthropicVersionBytes []byte

	// suspect has both pools' connections checked before their next call
	// once one failed on a connection the provider had closed (Do).
	suspect *keepalive.Suspicion

	// Two pools: a stream's body is read as it comes (hc); a JSON answer
	// is read whole by fasthttp (buffered), which saves a copy and a
	// stream reader per call, ~20 µs at 2 000 requests/s on a 2-core box.
	hc       *fasthttp.HostClient
	buffered *fasthttp.HostClient

	// tlsConfig is an https provider's, read at each dial (tests trust
	// their own server's certificate through it).
	tlsConfig *tls.Config
}

// staleCheckIdle: a pooled provider connection idle at least this long is
// checked before a call is written on it. One reused sooner, as a busy
// node reuses them, is not: the check is a syscall, ~3 µs of CPU a call on
// a 2-core VM and 3 % of saturated throughput (BenchmarkProxyParallel,
// 18.5k against 19.2k requests/s; checking every reuse: 3.6 µs more CPU a
// call than now, measured later). What that leaves: a provider restarted
// under load fails, besides the calls in flight on it, the next call on a
// connection reused within the millisecond (502; the pools are LIFO, so
// under load nearly every reuse is one:
// TestKnownLimitProviderRestartRightAfterAnswer). That failure has every
// connection of both pools checked before its next call (Do), so the
// calls written after it go on new connections: those written before it
// fail, not one on every connection.
const staleCheckIdle = time.Millisecond

// DefaultMaxAnswerBytes bounds a JSON answer read whole.
const DefaultMaxAnswerBytes = 64 << 20

// ProviderConfig is what New needs to know about an upstream.
type ProviderConfig struct {
	Name             string
	Kind             Kind
	BaseURL          string
	APIKey           string
	AnthropicVersion string
	ConnectTimeout   time.Duration
	// Timeout is the longest the upstream may take to start answering,
	// and for an answer read whole (Do with stream false) to give all of
	// it; StreamIdle the longest a streamed answer may stay silent between
	// two reads after it started. Past either the call fails with
	// ErrTimeout (a 504 for the client).
	Timeout    time.Duration
	StreamIdle time.Duration
	// MaxConns bounds each of the two pools (streams, JSON answers);
	// every live stream holds one connection.
	MaxConns int
	// MaxAnswerBytes bounds an answer read whole (DefaultMaxAnswerBytes
	// when 0); past it the call fails with ErrUnreachable.
	MaxAnswerBytes int
}

// Errors a call can end with, for the caller to map to 502 and 504.
var (
	ErrTimeout     = errors.New("upstream timed out")
	ErrUnreachable = errors.New("upstream unreachable")
	// ErrAnswerTooLarge (with ErrUnreachable): the provider answered, past
	// MaxAnswerBytes. It generated the answer, and bills it.
	ErrAnswerTooLarge = errors.New("answer too large")
)

// NewProvider builds a provider and its connection pool.
func NewProvider(c ProviderConfig) (*Provider, error) {
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("upstream %s: base_url %q is not an absolute http(s) URL", c.Name, c.BaseURL)
	}
	host := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			host += ":443"
		} else {
			host += ":80"
		}
	}
	prefix := strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1")
	if c.MaxConns <= 0 {
		c.MaxConns = 4096
	}
	if c.AnthropicVersion == "" {
		c.AnthropicVersion = "2023-06-01"
	}
	first, idle := c.Timeout, c.StreamIdle
	if first <= 0 {
		first = 10 * time.Minute
	}
	if idle <= 0 {
		idle = first
	}
	dialer := &net.Dialer{Timeout: c.ConnectTimeout, KeepAlive: 30 * time.Second}
	if dialer.Timeout <= 0 {
		dialer.Timeout = 2 * time.Second
	}
	// A provider that closes idle connections sooner than the pool does
	// (vLLM's uvicorn after 5 s), or restarts, leaves closed ones in the
	// pool: each is found before a call is written on it, and the call
	// goes on another (package keepalive).
	suspect := new(keepalive.Suspicion)
	check := keepalive.Options{TLS: u.Scheme == "https", MinIdle: staleCheckIdle, Suspicion: suspect}
	var p *Provider
	dial := func(addr string) (net.Conn, error) {
		c, err := dialer.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		c = keepalive.Checked(c, check)
		if u.Scheme == "https" {
			return handshake(c, p.tlsConfig, dialer.Timeout)
		}
		return c, nil
	}
	p = &Provider{
		Name:                  c.Name,
		Kind:                  c.Kind,
		apiKey:                c.APIKey,
		apiKeyBytes:           []byte(c.APIKey),
		bearerBytes:           []byte("Bearer " + c.APIKey),
		anthropicVersionBytes: []byte(c.AnthropicVersion),
		prefix:                prefix,
		suspect:               suspect,
		scheme:                u.Scheme,
		host:                  u.Host,
		// Sessions resumed: a provider that closes idle connections
		// (uvicorn after 5 s) costs a shorter handshake on the next.
		tlsConfig: &tls.Config{ServerName: u.Hostname(), ClientSessionCache: tls.NewLRUClientSessionCache(0)},
	}
	if c.MaxAnswerBytes <= 0 {
		c.MaxAnswerBytes = DefaultMaxAnswerBytes
	}
	pool := func(stream bool) *fasthttp.HostClient {
		hc := &fasthttp.HostClient{
			Addr:                host,
			Name:                "ringgate",
			IsTLS:               u.Scheme == "https",
			MaxConns:            c.MaxConns,
			MaxConnWaitTimeout:  time.Second,
			MaxIdleConnDuration: 30 * time.Second,
			// The connection released last is taken first, as net/http
			// does: under load the few a node needs are reused within
			// staleCheckIdle, unchecked, and the rest of a burst's idle
			// out. Taken in turn (FIFO), every connection a burst opened
			// stays in use and idle past staleCheckIdle between calls: a
			// check on every call, 12 µs of CPU a call more than the
			// floor instead of 7 (8 clients after 64 had opened 64
			// connections, TestProviderPoolReusesRecentConnections).
			ConnPoolStrategy:         fasthttp.LIFO,
			StreamResponseBody:       stream,
			NoDefaultUserAgentHeader: true,
			// Prepare builds the path from the base URL's and a known
			// endpoint's: nothing to normalize on every request.
			DisablePathNormalizing: true,
			ReadBufferSize:         16 << 10,
		}
		if stream {
			hc.Dial = IdleDialer(first, idle, dial)
		} else {
			// An answer read whole has timeout for the whole of it: a
			// provider that sends its headers and then dribbles the body
			// cannot hold the call past it.
			hc.Dial = IdleDialer(first, 0, dial)
			hc.MaxResponseBodySize = c.MaxAnswerBytes
		}
		hc.RetryIfErr = keepalive.RetryStale(hc)
		return hc
	}
	p.hc, p.buffered = pool(true), pool(false)
	return p, nil
}

// IdleDialer wraps dial so that every connection it makes gives each read its
// own deadline: first for the answer's head after a request was written,
// idle for the reads after it. With idle <= 0 the reads after the head keep
// its deadline: first bounds the whole answer. dial returns the connection
// HTTP is spoken on: an https one has its TLS made in dial (handshake), not
// by fasthttp, which would put it above the deadlines, where the bytes
// read are ciphertext and no head can be followed.
func IdleDialer(first, idle time.Duration, dial fasthttp.DialFunc) fasthttp.DialFunc {
	return func(addr string) (net.Conn, error) {
		conn, err := dial(addr)
		if err != nil {
			return nil, err
		}
		return newIdleConn(conn, first, idle), nil
	}
}

// IdleDialerTimeout is IdleDialer for a dial that is given the request's
// timeout (0: none), which fasthttp passes to a HostClient's DialTimeout
// and not to its Dial.
func IdleDialerTimeout(first, idle time.Duration, dial fasthttp.DialFuncWithTimeout) fasthttp.DialFuncWithTimeout {
	return func(addr string, timeout time.Duration) (net.Conn, error) {
		conn, err := dial(addr, timeout)
		if err != nil {
			return nil, err
		}
		return newIdleConn(conn, first, idle), nil
	}
}

// newIdleConn wraps conn; a TLS one stays known as such to fasthttp, which
// would otherwise wrap it in TLS once more.
func newIdleConn(conn net.Conn, first, idle time.Duration) net.Conn {
	c := &idleConn{Conn: conn, first: first, idle: idle}
	if _, ok := conn.(*tls.Conn); ok {
		return tlsIdleConn{c}
	}
	return c
}

// tlsIdleConn is an idleConn over a TLS connection whose handshake is done
// (handshake): fasthttp takes a connection with a Handshake method for one
// that carries its TLS already.
type tlsIdleConn struct{ *idleConn }

func (tlsIdleConn) Handshake() error { return nil }

// handshake makes c a TLS connection to the provider, its handshake within
// timeout (connect_timeout: connecting includes it). A server that takes the
// TCP connection and never answers the handshake fails the dial, not the
// call's timeout later.
func handshake(c net.Conn, cfg *tls.Config, timeout time.Duration) (net.Conn, error) {
	tc := tls.Client(c, cfg)
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		_ = c.Close()
		return nil, err
	}
	if err := tc.Handshake(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("tls handshake with %s: %w", cfg.ServerName, err)
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		_ = c.Close()
		return nil, err
	}
	return tc, nil
}

// idleConn gives every read its own deadline, so a silent upstream fails
// while a long stream that keeps talking is never cut (fasthttp's ReadTimeout
// would bound the whole streamed body). The answer's head (its status line
// and headers, after any interim 1xx heads: 100 Continue, 103 Early Hints)
// is read within first of the first read after the request was written;
// later reads wait up to idle each, or, with idle <= 0, until the head's
// deadline. A deadline the caller sets (fasthttp's DoTimeout does, per
// request) still bounds every read. An HTTP/1 client connection never
// reads and writes at once, so these fields need no lock.
type idleConn struct {
	net.Conn
	first, idle time.Duration
	inHead      bool      // the answer's final head is not all read yet
	headBy      time.Time // its deadline, set at its first read; zero before
	head        headScan
	until       time.Time // the caller's deadline; zero: none
}

func (c *idleConn) Write(p []byte) (int, error) {
	c.inHead, c.headBy, c.head = true, time.Time{}, headScan{}
	return c.Conn.Write(p)
}

func (c *idleConn) Read(p []byte) (int, error) {
	var deadline time.Time
	switch {
	case c.inHead:
		if c.headBy.IsZero() {
			c.headBy = time.Now().Add(c.first)
		}
		deadline = c.headBy
	case c.idle <= 0:
		return c.Conn.Read(p) // the head's deadline holds
	default:
		deadline = time.Now().Add(c.idle)
	}
	if !c.until.IsZero() && c.until.Before(deadline) {
		deadline = c.until
	}
	if err := c.Conn.SetReadDeadline(deadline); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	if c.inHead && n > 0 {
		// Without an idle budget the head's deadline holds to the
		// end: where the head ends does not matter.
		c.inHead = c.idle > 0 && !c.head.final(p[:n])
	}
	return n, err
}

// headScan follows an answer's head through the reads: interim 1xx heads,
// then the final one, which ends at the first blank line after a status
// line that is not 1xx. Empty lines before a status line are skipped, and
// spaces after its version, as fasthttp's parser does.
type headScan struct {
	pos  int  // bytes of the current head read, from its status line
	line int  // bytes of its current line read, CR aside
	code byte // the first digit of its status; 0 until read
}

// final reports whether b, the next bytes read, ends the final head.
func (h *headScan) final(b []byte) bool {
	// The usual case: one read holds the whole head.
	if h.pos == 0 && len(b) > 9 && b[0] == 'H' && b[8] == ' ' && b[9] != ' ' && b[9] != '1' && bytes.Contains(b, headEnd) {
		return true
	}
	for _, c := range b {
		if h.pos == 0 && (c == '\r' || c == '\n') {
			continue
		}
		h.pos++
		if h.code == 0 && h.pos > len("HTTP/1.1") && c != ' ' {
			h.code = c
		}
		switch c {
		case '\n':
			if h.line > 0 {
				h.line = 0
				continue
			}
			if h.code != '1' {
				return true
			}
			*h = headScan{} // the next head follows
		case '\r':
		default:
			h.line++
		}
	}
	return false
}

var headEnd = []byte("\r\n\r\n")

// SetReadDeadline keeps the caller's deadline for the reads, which set
// their own (the earlier of it and the idle one).
func (c *idleConn) SetReadDeadline(t time.Time) error {
	c.until = t
	return nil
}

// SetDeadline is SetReadDeadline and the write deadline.
func (c *idleConn) SetDeadline(t time.Time) error {
	c.until = t
	return c.Conn.SetWriteDeadline(t)
}

// Prepare fills req for this provider: method, URL, authentication and the
// client headers that carry meaning for the provider. body is used as is.
//
// Names are set as fasthttp writes them and the client's headers are read
// in one pass: Set and Peek copy and normalize the name on every call
// (Prepare took 270 ns, 110 of them for that).
func (p *Provider) Prepare(req *fasthttp.Request, path []byte, body []byte, client *fasthttp.RequestHeader) {
	req.Header.SetMethod(fasthttp.MethodPost)
	var buf [128]byte
	req.SetRequestURIBytes(append(append(buf[:0], p.prefix...), path...))
	req.Header.SetHost(p.host)
	req.URI().SetScheme(p.scheme)
	req.Header.SetContentType("application/json")
	req.Header.SetCanonical(hAcceptEncoding, identity)
	if p.Kind == Anthropic {
		req.Header.SetCanonical(hAPIKey, p.apiKeyBytes)
		req.Header.SetCanonical(hAnthropicVersion, p.anthropicVersionBytes)
	} else if p.apiKey != "" {
		req.Header.SetCanonical(hAuthorization, p.bearerBytes)
	}
	passed := passOpenAI
	if p.Kind == Anthropic {
		passed = passAnthropic
	}
	var seen [maxPassed]bool
	for k, v := range client.All() {
		for i, name := range passed {
			if !seen[i] && len(k) == len(name) && (string(k) == string(name) || bytes.EqualFold(k, name)) {
				seen[i] = true // the first, as Peek gives
				if len(v) > 0 {
					req.Header.SetCanonical(name, v)
				}
			}
		}
	}
	req.SetBodyRaw(body)
}

// The client headers passed to a provider, by kind, as fasthttp writes
// their names. A client's anthropic-version replaces the configured one.
var (
	passOpenAI    = [][]byte{[]byte("Openai-Organization"), []byte("Openai-Project"), []byte("Openai-Beta"), []byte("Accept")}
	passAnthropic = [][]byte{hAnthropicVersion, []byte("Anthropic-Beta"), []byte("Accept")}

	hAcceptEncoding   = []byte("Accept-Encoding")
	identity          = []byte("identity")
	hAPIKey           = []byte("X-Api-Key")
	hAuthorization    = []byte("Authorization")
	hAnthropicVersion = []byte("Anthropic-Version")
)

// maxPassed is the most client headers passed to a provider of any kind.
const maxPassed = 4

// Do sends req and reads the response headers. For a stream (the client
// asked for one) the body is left in resp.BodyStream for the caller to read
// and close; otherwise it is read whole into resp.Body, and an answer that
// is an SSE stream after all is in resp.Body too.
func (p *Provider) Do(req *fasthttp.Request, resp *fasthttp.Response, stream bool) error {
	hc := p.buffered
	if stream {
		hc = p.hc
	}
	err := hc.Do(req, resp)
	if err == nil {
		return nil
	}
	if peerClosed(err) {
		// The provider closed a connection the pool held for alive: it
		// restarted (the others idle in both pools are as likely closed,
		// and a reuse within staleCheckIdle is not checked), or dropped
		// this one call. Each idle one is checked before its next call:
		// one found closed sends the call on another, one found open is
		// kept.
		p.suspect.Raise()
	}
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		return fmt.Errorf("%w: %w: %v", ErrUnreachable, ErrAnswerTooLarge, err)
	}
	return classify(err)
}

// peerClosed reports a call that failed on a connection its peer had
// closed (or reset) before the answer's first byte.
func peerClosed(err error) bool {
	return errors.Is(err, fasthttp.ErrConnectionClosed) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// classify maps a transport error to ErrTimeout or ErrUnreachable.
func classify(err error) error {
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("%w: %v", ErrTimeout, err)
	default:
		return fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
}

// ReadError maps an error met while reading a streamed body.
func ReadError(err error) error { return classify(err) }

// IsHopHeader reports headers that describe one connection, not the message,
// and headers the gateway sets itself; none of them is copied from the
// upstream's answer to the client.
func IsHopHeader(k []byte) bool {
	// By length first: every answer's headers go through here, and a
	// name compared with each of the list's took 0.1 µs a header.
	if len(k) < len(hopByLen) {
		for _, h := range hopByLen[len(k)] {
			if bytes.EqualFold(k, h) {
				return true
			}
		}
	}
	return len(k) >= len(rateLimitPrefix) && bytes.EqualFold(k[:len(rateLimitPrefix)], rateLimitPrefix)
}

var (
	rateLimitPrefix = []byte("x-ratelimit-")
	hopHeaders      = [][]byte{
		[]byte("Connection"), []byte("Keep-Alive"), []byte("Proxy-Connection"), []byte("Transfer-Encoding"),
		[]byte("Te"), []byte("Trailer"), []byte("Upgrade"), []byte("Content-Length"), []byte("Content-Encoding"),
		[]byte("Date"), []byte("Server"), []byte("Set-Cookie"), []byte("Alt-Svc"),
		// The gateway names itself: a provider that is another ringgate
		// does not. It names the request too: the id the client sent or
		// the node made stays the one its logs and the client know.
		[]byte("X-Ringgate-Node"), []byte("X-Request-Id"),
	}
	// hopByLen are hopHeaders by their length.
	hopByLen = func() (by [len("Transfer-Encoding") + 1][][]byte) {
		for _, h := range hopHeaders {
			by[len(h)] = append(by[len(h)], h)
		}
		return by
	}()
)
