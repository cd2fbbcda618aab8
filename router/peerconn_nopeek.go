//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package router

import "syscall"

// canPeek: no non-blocking peek here; pooled peer connections are used
// unchecked (a hop on one the peer closed fails as owner_failed).
const canPeek = false

func peerGone(syscall.RawConn) error { return nil }
