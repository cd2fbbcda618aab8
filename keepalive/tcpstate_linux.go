package keepalive

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// CanSeeClose: the kernel tells a socket's TCP state here, so a peer's close
// is seen even behind bytes queued on the socket (a TLS connection's: a
// session ticket, the close_notify alert before the FIN).
const CanSeeClose = true

// tcpEstablished is Linux's TCP_ESTABLISHED, the state of a connection
// neither side has closed.
const tcpEstablished = 1

// PeerClosed asks the kernel whether the connection is still established:
// nil if it is, else an error naming its state (CLOSE_WAIT: the peer sent
// its FIN; CLOSE: reset).
func PeerClosed(raw syscall.RawConn) error {
	var (
		state uint8
		serr  error
	)
	if err := raw.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			serr = err
			return
		}
		state = info.State
	}); err != nil {
		return err // closed on this side
	}
	switch {
	case serr != nil:
		return nil // no answer: assume it is there, as without the check
	case state != tcpEstablished:
		return fmt.Errorf("tcp state %d", state)
	}
	return nil
}
