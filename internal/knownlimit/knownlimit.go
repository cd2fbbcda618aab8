// Package knownlimit is test machinery: the switch for the tests that
// reproduce a known limit (docs/limits.md). They fail by design, so they
// run only when asked, with RINGGATE_KNOWN_LIMITS=1. It knows nothing of
// ringgate.
package knownlimit

import (
	"os"
	"testing"
)

// Only skips tb unless RINGGATE_KNOWN_LIMITS=1.
func Only(tb testing.TB) {
	tb.Helper()
	if !Asked() {
		tb.Skip("reproduces a known limit (docs/limits.md); set RINGGATE_KNOWN_LIMITS=1 to run it")
	}
}

// Asked reports whether the known limits' tests were asked for.
func Asked() bool { return os.Getenv("RINGGATE_KNOWN_LIMITS") == "1" }
