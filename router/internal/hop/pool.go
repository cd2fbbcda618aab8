// Package hop carries requests between the nodes of a cluster: one
// connection pool per peer, patient with a peer that is slow to connect
// once, and marking down one that refuses connections, so that the
// requests meant for it are decided elsewhere at once. It carries the
// signed calls nodes make to each other and checks one that arrives
// (peer.go). It knows nothing of tenants or limits, and signs nothing
// itself: what a hop means is the router's, and package hopsign signs and
// checks it.
//
// The network is injected (Config.Dial): TCP in production, Inmem in
// tests, where a partition is a call.
package hop

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/keepalive"
	"github.com/ringgate/ringgate/upstream"
)

// DownFor is how long a peer that refused a connection is skipped before
// it is tried again; meanwhile its requests are decided elsewhere.
const DownFor = time.Second

// patientConnect is the least a second connect attempt to a peer that was
// answering waits (10 × Config.Connect otherwise).
const patientConnect = 100 * time.Millisecond

// A Dialer connects to a peer's address within timeout.
type Dialer func(addr string, timeout time.Duration) (net.Conn, error)

// Config is a Pool's.
type Config struct {
	Connect     time.Duration // the budget to connect to a peer
	First, Idle time.Duration // read budgets: the first byte, then between reads
	Dial        Dialer        // nil: TCP
	Clock       func() int64  // Unix ns; nil: the wall clock
}

// ErrUnreachable wraps the error of a request the peer never saw: it could
// not be connected to, or every pooled connection tried was stale. The
// request can be decided elsewhere without being counted twice.
var ErrUnreachable = errors.New("peer unreachable")

// Pool is a connection pool per peer address.
type Pool struct {
	cfg    Config
	mu     sync.Mutex
	byAddr map[string]*peer
}

type peer struct {
	hc        *fasthttp.HostClient
	downUntil atomic.Int64 // Unix ns; 0: up
	timeouts  atomic.Int32 // connect timeouts in a row
}

// New makes a pool.
func New(c Config) *Pool {
	if c.Dial == nil {
		c.Dial = func(addr string, timeout time.Duration) (net.Conn, error) {
			return (&net.Dialer{Timeout: timeout}).Dial("tcp", addr)
		}
	}
	if c.Clock == nil {
		c.Clock = func() int64 { return time.Now().UnixNano() }
	}
	return &Pool{cfg: c, byAddr: make(map[string]*peer)}
}

// Down reports whether the peer at addr was marked down a moment ago: it
// is not tried now.
func (p *Pool) Down(addr string) bool {
	until := p.get(addr).downUntil.Load()
	return until != 0 && p.cfg.Clock() < until
}

// Hop sends a client's request to the peer at addr, with no deadline of
// its own, and reads the answer's head (its body streams). An error that
// wraps ErrUnreachable means the peer never saw it; a refused connection,
// or a second slow connect in a row, marks the peer down for DownFor. An
// answer marks it up.
func (p *Pool) Hop(addr string, req *fasthttp.Request, resp *fasthttp.Response) error {
	pc := p.get(addr)
	err := pc.hc.Do(req, resp)
	var de *dialError
	switch {
	case err == nil:
		pc.downUntil.Store(0)
		pc.timeouts.Store(0)
		return nil
	case errors.As(err, &de) || errors.Is(err, fasthttp.ErrNoFreeConns):
		if errors.Is(err, syscall.ECONNREFUSED) || pc.timeouts.Add(1) >= 2 {
			// Nobody listens, or a second slow connect: a busy peer
			// that is alive is given one.
			pc.downUntil.Store(p.cfg.Clock() + int64(DownFor))
		}
		return &unreachable{err}
	case errors.Is(err, keepalive.ErrStale):
		// Every pooled connection tried was closed by the peer before
		// the request was written: not a sign it is down, the next hop
		// dials afresh.
		return &unreachable{err}
	}
	return err
}

// Call sends req to the peer at addr within timeout, leaving the peer's
// down mark as it is: an admin view or a hand-over asked of it. An error
// that wraps ErrUnreachable means the peer never saw it.
func (p *Pool) Call(addr string, req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration) error {
	err := p.get(addr).hc.DoTimeout(req, resp, timeout)
	var de *dialError
	if errors.As(err, &de) {
		return &unreachable{err}
	}
	return err
}

// unreachable is an error of a request the peer never saw; its text is
// the cause's.
type unreachable struct{ err error }

func (e *unreachable) Error() string   { return e.err.Error() }
func (e *unreachable) Unwrap() []error { return []error{ErrUnreachable, e.err} }

// dialError marks a failure to connect: the peer never saw the request.
type dialError struct{ err error }

func (e *dialError) Error() string { return "connect to owner: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

func (p *Pool) get(addr string) *peer {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pc, ok := p.byAddr[addr]; ok {
		return pc
	}
	pc := &peer{}
	pc.hc = &fasthttp.HostClient{
		Addr:                     addr,
		Name:                     "ringgate-peer",
		DialTimeout:              upstream.IdleDialerTimeout(p.cfg.First, p.cfg.Idle, p.dialer(pc)),
		MaxConns:                 4096,
		MaxConnWaitTimeout:       100 * time.Millisecond,
		MaxIdleConnDuration:      30 * time.Second,
		StreamResponseBody:       true,
		NoDefaultUserAgentHeader: true,
	}
	pc.hc.RetryIfErr = keepalive.RetryStale(pc.hc)
	p.byAddr[addr] = pc
	return pc
}

// dialer connects to pc. timeout is the request's own (fasthttp passes a
// DoTimeout's; a Call has one, a Hop none: 0): it caps both tries
// together.
func (p *Pool) dialer(pc *peer) func(addr string, timeout time.Duration) (net.Conn, error) {
	return func(addr string, timeout time.Duration) (net.Conn, error) {
		start := time.Now()
		try := func(d time.Duration) (net.Conn, error) {
			if timeout > 0 {
				d = min(d, timeout-time.Since(start))
				if d <= 0 {
					return nil, os.ErrDeadlineExceeded
				}
			}
			return p.cfg.Dial(addr, d)
		}
		c, err := try(p.cfg.Connect)
		var ne net.Error
		if err != nil && errors.As(err, &ne) && ne.Timeout() && pc.timeouts.Load() == 0 {
			// A slow connect to a peer that answered last time is more
			// likely a peer that is alive but busy (and admitting its
			// tenants' full limits) than a dead one: deciding elsewhere
			// now would admit a share on top. Wait longer once; a
			// second slow connect in a row marks it down (Hop).
			c, err = try(max(10*p.cfg.Connect, patientConnect))
		}
		if err != nil {
			return nil, &dialError{err}
		}
		return keepalive.Checked(c, keepalive.Options{}), nil // see package keepalive
	}
}
