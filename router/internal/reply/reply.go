// Package reply owns the shape of what a node writes back: OpenAI's error
// body, the x-ratelimit-* and Retry-After headers, the node's name, and the
// byte mechanics of copying a provider's or a peer's answer through (its
// headers, its body read whole or streamed, the write deadlines that cut a
// client that stops reading), and the server's side of the exchange: the
// read budget of a request's body and the log of fasthttp's own errors.
//
// It writes what it is given: it knows nothing of tenants, of how a limit
// decides (a limiter's or a lease's decision is only read, for its
// figures), of how a hop is signed, or of the cluster. Which error to
// answer, and when, is the router's.
package reply

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/upstream"
)

// Fail answers with an error in OpenAI's shape.
func Fail(ctx *fasthttp.RequestCtx, status int, typ, code, message string) {
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetStatusCode(status)
	ctx.SetBody(upstream.ErrorBody(message, typ, code, ""))
}

// FailParam is Fail for a client error about one parameter.
func FailParam(ctx *fasthttp.RequestCtx, ce *upstream.ClientError) {
	ctx.Response.Header.SetContentType("application/json")
	status := ce.Status
	if status < 400 || status > 499 {
		status = fasthttp.StatusBadRequest
	}
	ctx.SetStatusCode(status)
	ctx.SetBody(upstream.ErrorBody(ce.Message, "invalid_request_error", ce.Code, ce.Param))
}

// SetRateHeaders writes OpenAI's x-ratelimit-* headers from a decision. A
// dimension with no limit gets no headers: there is no true value to give.
func SetRateHeaders(h *fasthttp.ResponseHeader, d *limiter.Decision) {
	var buf [32]byte
	if d.LimitRequests > 0 {
		h.SetCanonical(hLimitRequests, strconv.AppendInt(buf[:0], d.LimitRequests, 10))
		h.SetCanonical(hRemainingRequests, strconv.AppendInt(buf[:0], d.RemainingRequests, 10))
		h.SetCanonical(hResetRequests, appendReset(buf[:0], d.ResetRequests))
	}
	if d.LimitTokens > 0 {
		h.SetCanonical(hLimitTokens, strconv.AppendInt(buf[:0], d.LimitTokens, 10))
		h.SetCanonical(hRemainingTokens, strconv.AppendInt(buf[:0], d.RemainingTokens, 10))
		h.SetCanonical(hResetTokens, appendReset(buf[:0], d.ResetTokens))
	}
}

// SetNode names the node (name) in an answer (x-ringgate-node), set as
// fasthttp writes the name, which skips its normalizing on every answer.
func SetNode(h *fasthttp.ResponseHeader, name []byte) {
	h.SetCanonical(hNode, name)
}

var hNode = []byte("X-Ringgate-Node")

// The x-ratelimit-* names as fasthttp writes them (it normalizes header
// names): set as they are, they skip that pass on every answer. Names are
// case-insensitive; clients read x-ratelimit-limit-requests.
var (
	hLimitRequests     = []byte("X-Ratelimit-Limit-Requests")
	hRemainingRequests = []byte("X-Ratelimit-Remaining-Requests")
	hResetRequests     = []byte("X-Ratelimit-Reset-Requests")
	hLimitTokens       = []byte("X-Ratelimit-Limit-Tokens")
	hRemainingTokens   = []byte("X-Ratelimit-Remaining-Tokens")
	hResetTokens       = []byte("X-Ratelimit-Reset-Tokens")
)

// appendReset formats a reset time the way OpenAI does ("1s", "6m0s",
// "120ms"), rounded up to the millisecond so it is never early.
// It is time.Duration's String of that rounded duration, without its
// allocation (on every answer).
func appendReset(b []byte, d time.Duration) []byte {
	if d <= 0 {
		return append(b, "0s"...)
	}
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	if ms < 1000 {
		return append(strconv.AppendInt(b, ms, 10), "ms"...)
	}
	h, m, s, frac := ms/3_600_000, ms/60_000%60, ms/1000%60, ms%1000
	if h > 0 {
		b = append(strconv.AppendInt(b, h, 10), 'h')
	}
	if h > 0 || m > 0 {
		b = append(strconv.AppendInt(b, m, 10), 'm')
	}
	b = strconv.AppendInt(b, s, 10)
	if frac > 0 {
		digits := []byte{'.', byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
		for digits[len(digits)-1] == '0' {
			digits = digits[:len(digits)-1]
		}
		b = append(b, digits...)
	}
	return append(b, 's')
}

// RefuseOn answers a limiter refusal: 429, Retry-After in whole seconds
// (rounded up) and in milliseconds, and a message naming the dimension
// and, for a level of the tenant's limits other than its own (by: "team
// research", "model gpt-4o"), the level.
func RefuseOn(ctx *fasthttp.RequestCtx, d *limiter.Decision, window time.Duration, requested int64, by string) {
	setRetryAfter(&ctx.Response.Header, d.RetryAfter)
	of := ""
	if by != "" {
		of = " (" + by + ")"
	}
	var msg string
	switch d.Limited {
	case limiter.Requests:
		msg = fmt.Sprintf("Rate limit reached for requests%s: limit %d per %s. Please try again in %s.",
			of, d.LimitRequests, window, roundUp(d.RetryAfter))
	case limiter.Tokens:
		if d.TooLarge {
			msg = fmt.Sprintf("Request too large: it needs about %d tokens, more than the limit%s of %d per %s. Lower max_tokens or the prompt.",
				requested, of, d.LimitTokens, window)
		} else {
			msg = fmt.Sprintf("Rate limit reached for tokens%s: limit %d per %s, requested %d. Please try again in %s.",
				of, d.LimitTokens, window, requested, roundUp(d.RetryAfter))
		}
	case limiter.Concurrency:
		msg = fmt.Sprintf("Too many concurrent requests%s: limit %d in flight. Please try again in %s.",
			of, d.LimitConcurrency, roundUp(d.RetryAfter))
	}
	Fail(ctx, fasthttp.StatusTooManyRequests, d.Limited.String(), "rate_limit_exceeded", msg)
}

// RefuseBudget answers a request the provider's limit has no room for.
func RefuseBudget(ctx *fasthttp.RequestCtx, d *lease.Decision, what string) {
	setRetryAfter(&ctx.Response.Header, d.RetryAfter)
	dim := d.Limited.String()
	msg := fmt.Sprintf("The provider's limit on %s (%s) is reached for now. Please try again in %s.", dim, what, roundUp(max(d.RetryAfter, time.Millisecond)))
	if d.Degraded && !d.Storeless {
		msg = fmt.Sprintf("The provider's limit on %s (%s) is enforced on this node's strict share while the gateway's coordination store is unreachable. Please try again in %s.",
			dim, what, roundUp(max(d.RetryAfter, time.Millisecond)))
	}
	typ := dim
	if d.Limited == limiter.Concurrency {
		typ = "requests"
	}
	Fail(ctx, fasthttp.StatusTooManyRequests, typ, "rate_limit_exceeded", msg)
}

// setRetryAfter writes Retry-After in whole seconds (rounded up, at least
// 1) and retry-after-ms.
func setRetryAfter(h *fasthttp.ResponseHeader, d time.Duration) {
	h.Set("Retry-After", strconv.FormatInt(max(1, int64((d+time.Second-1)/time.Second)), 10))
	h.Set("retry-after-ms", strconv.FormatInt(CeilMs(d), 10))
}

// CeilMs is d in whole milliseconds, rounded up, as retry-after-ms says it.
func CeilMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func roundUp(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// FailSoon is Fail for a refusal that passes in a moment, before anything
// was admitted: the client retries after Retry-After's one second.
func FailSoon(ctx *fasthttp.RequestCtx, status int, typ, code, message string) {
	ctx.Response.Header.Set("Retry-After", "1")
	Fail(ctx, status, typ, code, message)
}

// UpstreamFailed answers a call the provider (name) did not answer: 504
// when it timed out, 502 else. It reports whether it timed out.
func UpstreamFailed(ctx *fasthttp.RequestCtx, name string, err error) (timedOut bool) {
	if errors.Is(err, upstream.ErrTimeout) {
		Fail(ctx, fasthttp.StatusGatewayTimeout, "upstream_error", "upstream_timeout", fmt.Sprintf("Upstream %q did not answer in time.", name))
		return true
	}
	Fail(ctx, fasthttp.StatusBadGateway, "upstream_error", "upstream_unreachable", fmt.Sprintf("Upstream %q failed: %v", name, err))
	return false
}

// JSON answers with v as JSON.
func JSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		Fail(ctx, fasthttp.StatusInternalServerError, "server_error", "encode", err.Error())
		return
	}
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetStatusCode(status)
	ctx.SetBody(b)
}
