//go:build !linux

package keepalive

import "syscall"

// CanSeeClose: the TCP state is not read here; a connection whose peer
// closed it behind queued bytes (TLS) is used unchecked.
const CanSeeClose = false

// PeerClosed never finds the peer closed here.
func PeerClosed(syscall.RawConn) error { return nil }
