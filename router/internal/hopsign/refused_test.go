package hopsign

import (
	"fmt"
	"testing"

	"github.com/valyala/fasthttp"
)

// Each verification error has its word (wrapped too), anything else is a
// bad signature; only an owner's 401 or 503 carries a refusal.
func TestRefusalWords(t *testing.T) {
	for err, want := range map[error]string{ErrStale: "stale", ErrBeforeStart: "before_start", ErrReplay: "replay",
		ErrTarget: "target", ErrMalformed: "malformed", ErrUnsigned: "unsigned", ErrSignature: "signature",
		fmt.Errorf("hop: %w", ErrReplay): "replay"} {
		if got := Reason(err); got != want {
			t.Errorf("Reason(%v) = %q, want %q", err, got, want)
		}
	}
	for status, want := range map[int]string{401: "stale", 503: "stale", 200: "", 429: ""} {
		var resp fasthttp.Response
		resp.SetStatusCode(status)
		resp.Header.Set(RefusedHeader, "stale")
		if got := Refusal(&resp); got != want {
			t.Errorf("Refusal of a %d = %q, want %q", status, got, want)
		}
	}
}
