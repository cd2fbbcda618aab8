// Package keepalive finds a pooled keep-alive connection its peer has
// closed before a request is written on it, so that an HTTP client sends
// again exactly the requests the peer cannot have seen. It is used for the
// hops to other nodes and for the calls to providers, and to see a client
// hang up; it knows nothing of what travels on the connections.
//
// A request on a pooled connection the peer has just closed (a node killed
// or restarted, a provider restarted, or one that closes idle connections
// sooner than this side's pool does: vLLM's uvicorn after 5 s) fails, and
// fasthttp cannot say whether the peer saw it: a write to a socket the peer
// has closed succeeds locally, and the read that follows returns io.EOF
// (ErrConnectionClosed) or ECONNRESET, the same errors as a peer that read
// the request, acted on it and died before answering. fasthttp's own retry
// (RetryIf, isIdempotent) never sends a POST again for that reason.
//
// The difference is when the peer closed: a peer that closed before this
// side wrote the request did so earlier, and its FIN (or RST) is already
// queued on this side's socket. So before the first byte of a request on a
// reused connection, a Checked connection peeks at the socket without
// blocking (recv MSG_PEEK|MSG_DONTWAIT, one syscall, ~1 µs): end of stream,
// a reset or bytes nobody asked for mean the connection is dead, nothing is
// written and the write fails with ErrStale. Over TLS, bytes queued on an
// idle connection are normal (a session ticket, the close_notify alert
// before the FIN) and hide the FIN from a peek, so a TLS connection is
// checked by its TCP state instead (Linux: TCP_INFO; elsewhere not at
// all). The HostClient then retries
// on another connection (RetryStale, only for ErrStale), dropping its other
// idle ones, which usually died with the same peer. What is left ambiguous
// is a request written before the peer's socket closed: one really in
// flight on the peer when it went.
package keepalive

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// ErrStale: a pooled connection was found closed by the peer before
// anything of the request was written on it; the peer cannot have seen it.
var ErrStale = errors.New("pooled connection already closed by the peer; nothing was written")

// checkedConn is a connection that checks, before it writes a request on a
// kept-alive connection, that the peer has not closed it. An HTTP/1 client
// connection never reads and writes at once (fasthttp hands it from one
// request to the next through its pool), so its fields need no lock.
type checkedConn struct {
	net.Conn
	raw     syscall.RawConn // nil: no check
	gone    func(syscall.RawConn) error
	minIdle time.Duration
	reused  bool      // a response was read: the next write starts a request
	readAt  time.Time // the last read that returned bytes, when minIdle > 0
	suspect *Suspicion
	seen    uint64 // suspect's count when the last request was written
	written bool   // a request was written on it
}

// A Suspicion marks the connections of a pool (or of several pools to one
// peer) to be checked before their next request however recently they were
// used: Raise it when a call failed on a connection its peer had closed,
// as a peer that restarts closes them all. A connection found closed then
// fails its write with ErrStale, and the request goes on another
// (RetryStale); one found open is kept. A connection is checked for it
// once, before the first request written on it after the Raise: one whose
// request was written before may have had its answer and the peer's close
// queued together, whenever the answer is read.
type Suspicion struct{ raised atomic.Uint64 }

// Raise has every connection using s checked before its next request.
func (s *Suspicion) Raise() { s.raised.Add(1) }

// Options say how a connection is checked.
type Options struct {
	// TLS: the connection carries TLS, checked by its TCP state.
	TLS bool
	// MinIdle > 0 checks only a connection idle that long since its last
	// read. A connection reused sooner, as a busy client reuses them, is
	// written on unchecked: a peer that closed it right after its answer
	// (a restart, a per-connection request budget) then fails that
	// request. 0 checks every reuse.
	MinIdle time.Duration
	// Suspicion, if set, has a connection reused within MinIdle checked
	// too once it is raised.
	Suspicion *Suspicion
}

// Checked wraps a client connection so that a request written on it after
// a response was read is first checked for a peer that closed it.
func Checked(c net.Conn, o Options) net.Conn {
	cc := &checkedConn{Conn: c, gone: PeerGone, minIdle: o.MinIdle, suspect: o.Suspicion}
	can := CanPeek
	if o.TLS {
		cc.gone, can = PeerClosed, CanSeeClose
	}
	if sc, ok := c.(syscall.Conn); ok && can {
		if raw, err := sc.SyscallConn(); err == nil {
			cc.raw = raw
		}
	}
	return cc
}

func (c *checkedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.reused = true
		if c.minIdle > 0 {
			c.readAt = time.Now()
		}
	}
	return n, err
}

// due reports whether a request about to be written on the reused
// connection must first be checked.
func (c *checkedConn) due() bool {
	return c.minIdle <= 0 || time.Since(c.readAt) >= c.minIdle ||
		(c.suspect != nil && c.suspect.raised.Load() != c.seen)
}

func (c *checkedConn) Write(p []byte) (int, error) {
	if c.reused || !c.written { // a request starts
		if c.reused && c.raw != nil && c.due() {
			if err := c.gone(c.raw); err != nil {
				return 0, fmt.Errorf("%w (%v)", ErrStale, err)
			}
		}
		c.reused, c.written = false, true
		if c.suspect != nil {
			c.seen = c.suspect.raised.Load()
		}
	}
	return c.Conn.Write(p)
}

// RetryStale is a HostClient's RetryIfErr for Checked connections: only a
// request that was never written is sent again, on another connection; the
// idle ones left are closed first (a peer that closed one has usually
// closed them all).
func RetryStale(hc *fasthttp.HostClient) fasthttp.RetryIfErrFunc {
	return func(_ *fasthttp.Request, _ int, err error) (resetTimeout, retry bool) {
		if !errors.Is(err, ErrStale) {
			return false, false
		}
		hc.CloseIdleConnections()
		return false, true
	}
}
