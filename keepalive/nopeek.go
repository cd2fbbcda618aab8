//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package keepalive

import (
	"errors"
	"syscall"
)

// CanPeek: no non-blocking peek here; pooled connections are used
// unchecked (a request on one the peer closed fails).
const CanPeek = false

// ErrUnasked is PeerGone's "bytes queued" (peek.go); never returned here.
var ErrUnasked = errors.New("unexpected bytes on an idle connection")

// PeerGone never finds a peer gone here: nothing is peeked at.
func PeerGone(syscall.RawConn) error { return nil }
