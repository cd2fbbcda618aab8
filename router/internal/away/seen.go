package away

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/limiter"
)

// Seen is a tenant's usage at its owner as the x-ratelimit headers of the
// owner's last answer relayed here reported it.
type Seen struct {
	at, requests, tokens atomic.Int64
}

// Note records that the owner said at now that the tenant used requests
// and tokens.
func (s *Seen) Note(now, requests, tokens int64) {
	s.requests.Store(requests)
	s.tokens.Store(tokens)
	s.at.Store(now)
}

// NoteHeaders records what the owner's answer h says the tenant has used.
// It allocates nothing: two header lookups and integer parses.
func (s *Seen) NoteHeaders(now int64, h *fasthttp.ResponseHeader) {
	used := func(limit, remaining string) int64 {
		l, err1 := strconv.ParseInt(string(h.Peek(limit)), 10, 64)
		rem, err2 := strconv.ParseInt(string(h.Peek(remaining)), 10, 64)
		if err1 != nil || err2 != nil || l <= 0 {
			return 0
		}
		return max(0, l-rem)
	}
	s.Note(now, used("x-ratelimit-limit-requests", "x-ratelimit-remaining-requests"),
		used("x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens"))
}

// Last is when the owner last said what the tenant used (0: never), and
// what.
func (s *Seen) Last() (at, requests, tokens int64) {
	return s.at.Load(), s.requests.Load(), s.tokens.Load()
}

// Seed charges a tenant's fallback share with its share (1/n) of the
// owner's usage as last seen in its answers; with none seen within the
// window, with 1/n of the whole limit (full): an edge that knows nothing of
// what the owner admitted before it went silent assumes it admitted all it
// could, and its share opens as that window passes. So does an edge whose
// last answers from the owner are no account of its usage (stale: from
// before it left a spill, or told to be blind). It says which account it
// used.
func (s *Seen) Seed(share *limiter.Tenant, now int64, window time.Duration, n int64, full limiter.Limits, stale func(at int64) bool) string {
	at, reqs, toks := s.Last()
	how := "owner_answers"
	if at == 0 || now-at >= int64(window) || stale(at) {
		at, reqs, toks, how = now, full.Requests, full.Tokens, "full_window"
	}
	ceil := func(v int64) int64 { return (v + n - 1) / n }
	share.ChargeAt(now, at, ceil(reqs), ceil(toks))
	return how
}
