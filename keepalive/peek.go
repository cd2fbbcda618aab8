//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package keepalive

import (
	"errors"
	"io"
	"syscall"
)

// CanPeek: a socket can be peeked at without blocking here.
const CanPeek = true

// ErrUnasked: the peer sent bytes on an idle connection (an answer to no
// request of ours); the connection is out of step and not used. On a
// server's connection it is a client's next request, sent early.
var ErrUnasked = errors.New("unexpected bytes on an idle connection")

// PeerGone peeks at an idle connection's socket without blocking: nil when
// nothing is queued (the peer is there), else why the connection is dead.
func PeerGone(raw syscall.RawConn) error {
	var (
		buf  [1]byte
		n    int
		rerr error
	)
	// Control, not Read: a read deadline set on the connection (the
	// server's request timeouts, long past while a call waits for its
	// upstream) would fail a Read at once, as if the peer had gone. The
	// recv never blocks, so no deadline is needed.
	if err := raw.Control(func(fd uintptr) {
		n, _, rerr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}); err != nil {
		return err // closed on this side
	}
	switch {
	case errors.Is(rerr, syscall.EAGAIN), errors.Is(rerr, syscall.EWOULDBLOCK), errors.Is(rerr, syscall.EINTR):
		return nil
	case rerr != nil:
		return rerr // ECONNRESET and the like
	case n == 0:
		return io.EOF // the peer closed it
	}
	return ErrUnasked
}
