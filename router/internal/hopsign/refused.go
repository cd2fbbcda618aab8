package hopsign

import (
	"errors"

	"github.com/valyala/fasthttp"
)

// RefusedHeader marks an owner's refusal of a hop: the owner did not take
// the request and admitted nothing. Its value says why: stale (timestamp
// outside hop_skew, e.g. a hop that waited in a paused owner's backlog),
// replay, signature, malformed, target, unsigned, not_ready.
const RefusedHeader = "X-Ringgate-Hop-Refused"

// Reason names a hop verification error for RefusedHeader.
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrStale):
		return "stale"
	case errors.Is(err, ErrBeforeStart):
		return "before_start"
	case errors.Is(err, ErrReplay):
		return "replay"
	case errors.Is(err, ErrTarget):
		return "target"
	case errors.Is(err, ErrMalformed):
		return "malformed"
	case errors.Is(err, ErrUnsigned):
		return "unsigned"
	}
	return "signature"
}

// Refusal is the reason an owner gave for refusing a hop, "" when it
// took it. Only the owner's own refusals (401 for a hop that failed
// verification, 503 while it catches up) count: a header on a relayed
// upstream answer does not.
func Refusal(resp *fasthttp.Response) string {
	switch resp.StatusCode() {
	case fasthttp.StatusUnauthorized, fasthttp.StatusServiceUnavailable:
		return string(resp.Header.Peek(RefusedHeader))
	}
	return ""
}
