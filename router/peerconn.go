package router

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/valyala/fasthttp"
)

// A hop on a pooled keep-alive connection to an owner that has just died
// (kill -9, crash, restart) fails, and fasthttp cannot say whether the owner
// saw it: a write to a socket the peer has closed succeeds locally, and the
// read that follows returns io.EOF (ErrConnectionClosed) or ECONNRESET, the
// same errors as an owner that read the request, admitted it and died before
// answering. fasthttp's own retry (RetryIf, isIdempotent) never re-sends a
// POST for that reason.
//
// The difference is when the peer closed: an owner that died before this
// node wrote the request closed the connection earlier, and its FIN (or RST)
// is already queued on this node's socket. So before the first byte of a
// request on a reused connection, checkedConn peeks at the socket without
// blocking (recv MSG_PEEK|MSG_DONTWAIT, one syscall, ~1 µs): end of stream,
// a reset or bytes nobody asked for mean the connection is dead, nothing is
// written and the write fails with errStaleConn. The HostClient then retries
// on another connection (RetryIfErr, only for errStaleConn), dropping its
// other idle ones, which died with the same owner: the retry dials, a dead
// owner refuses, and the edge falls back to its strict share. What is left
// ambiguous (502 owner_failed) is a hop written before the owner's socket
// closed: a request really in flight on the owner when it died.

// errStaleConn: a pooled peer connection was found closed by the peer before
// anything of the request was written on it; the peer cannot have seen it.
var errStaleConn = errors.New("pooled peer connection already closed by the peer; nothing was written")

// checkedConn is a peer connection that checks, before it writes a request
// on a kept-alive connection, that the peer has not closed it. An HTTP/1
// client connection never reads and writes at once (fasthttp hands it from
// one request to the next through its pool), so reused needs no lock.
type checkedConn struct {
	net.Conn
	raw    syscall.RawConn // nil: no check
	reused bool            // a response was read: the next write starts a request
}

func newCheckedConn(c net.Conn) net.Conn {
	cc := &checkedConn{Conn: c}
	if sc, ok := c.(syscall.Conn); ok && canPeek {
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
	}
	return n, err
}

func (c *checkedConn) Write(p []byte) (int, error) {
	if c.reused {
		c.reused = false
		if c.raw != nil {
			if err := peerGone(c.raw); err != nil {
				return 0, fmt.Errorf("%w (%v)", errStaleConn, err)
			}
		}
	}
	return c.Conn.Write(p)
}

// retryStale is the peers' HostClient.RetryIfErr: only a request that was
// never written is sent again, on another connection; the idle ones left
// are closed first (a peer that closed one has usually closed them all).
func retryStale(hc *fasthttp.HostClient) fasthttp.RetryIfErrFunc {
	return func(_ *fasthttp.Request, _ int, err error) (resetTimeout, retry bool) {
		if !errors.Is(err, errStaleConn) {
			return false, false
		}
		hc.CloseIdleConnections()
		return false, true
	}
}
