//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package router

import "errors"

// errUnasked is peerGone's "bytes queued" (peerconn_peek.go); never
// returned here, where nothing is peeked at (canPeek is false).
var errUnasked = errors.New("unexpected bytes on an idle connection")
