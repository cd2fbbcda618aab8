package fakeupstream

import (
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// ProviderLimits are the fake provider's own, true limits, enforced the way
// a real provider enforces its rate limits (see the package documentation
// for the exact rules). The zero value means no limits; a zero field means
// no limit in that dimension.
type ProviderLimits struct {
	// Window is the length of the sliding window of Requests and Tokens
	// (and of the models' ones). 0 means one minute.
	Window time.Duration
	// Requests is the most requests admitted in any window.
	Requests int64
	// Tokens is the most tokens charged in any window.
	Tokens int64
	// Concurrency is the most admitted requests in flight at once.
	Concurrency int
	// Models are limits of their own for the requests whose "model" field
	// is the key (compared exactly), in the same Window. A request must fit
	// both its model's limits and the upstream-wide ones.
	Models map[string]ModelLimits
}

// ModelLimits are the limits of one model (0: no limit in that dimension).
type ModelLimits struct {
	Requests    int64 `json:"requests,omitempty"`
	Tokens      int64 `json:"tokens,omitempty"`
	Concurrency int   `json:"concurrency,omitempty"`
}

// providerLimitsJSON is ProviderLimits on the wire: the window is a Go
// duration string ("2s", "1m0s").
type providerLimitsJSON struct {
	Window      string                 `json:"window,omitempty"`
	Requests    int64                  `json:"requests,omitempty"`
	Tokens      int64                  `json:"tokens,omitempty"`
	Concurrency int                    `json:"concurrency,omitempty"`
	Models      map[string]ModelLimits `json:"models,omitempty"`
}

// MarshalJSON encodes the limits as
// {"window":"2s","requests":..,"tokens":..,"concurrency":..,"models":{..}}.
func (l ProviderLimits) MarshalJSON() ([]byte, error) {
	j := providerLimitsJSON{Requests: l.Requests, Tokens: l.Tokens, Concurrency: l.Concurrency, Models: l.Models}
	if l.Window != 0 {
		j.Window = l.Window.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes what MarshalJSON encodes; "window" may also be a
// number of nanoseconds.
func (l *ProviderLimits) UnmarshalJSON(b []byte) error {
	var j struct {
		providerLimitsJSON
		Window json.RawMessage `json:"window"`
	}
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*l = ProviderLimits{Requests: j.Requests, Tokens: j.Tokens, Concurrency: j.Concurrency, Models: j.Models}
	if len(j.Window) == 0 || string(j.Window) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(j.Window, &s); err == nil {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("fakeupstream: window: %w", err)
		}
		l.Window = d
		return nil
	}
	var ns int64
	if err := json.Unmarshal(j.Window, &ns); err != nil {
		return fmt.Errorf("fakeupstream: window %s: want a duration string or nanoseconds", j.Window)
	}
	l.Window = time.Duration(ns)
	return nil
}

// normalized returns l with negative values cleared, the default window
// and a private copy of Models without the all-zero entries.
func (l ProviderLimits) normalized() ProviderLimits {
	l.Requests = max(l.Requests, 0)
	l.Tokens = max(l.Tokens, 0)
	l.Concurrency = max(l.Concurrency, 0)
	if l.Window <= 0 {
		l.Window = time.Minute
	}
	models := l.Models
	l.Models = nil
	for name, m := range models {
		m.Requests = max(m.Requests, 0)
		m.Tokens = max(m.Tokens, 0)
		m.Concurrency = max(m.Concurrency, 0)
		if m == (ModelLimits{}) {
			continue
		}
		if l.Models == nil {
			l.Models = make(map[string]ModelLimits, len(models))
		}
		l.Models[name] = m
	}
	return l
}

// clone returns l with a copy of Models.
func (l ProviderLimits) clone() ProviderLimits {
	l.Models = maps.Clone(l.Models)
	return l
}

// Stats are the counters of the provider limits. Breach counters count the
// requests refused (answered 429) by the limits; a request refused for
// several reasons counts once in Breaches and once in each of the
// per-dimension counters that applied.
type Stats struct {
	// Admitted is the number of requests that passed the limits (every
	// valid API request when there are none).
	Admitted int64 `json:"admitted"`
	// Breaches is the number of requests refused by the limits.
	Breaches int64 `json:"breaches"`
	// RequestBreaches, TokenBreaches and ConcurrencyBreaches count the
	// refusals in which the requests, tokens or concurrency limit (the
	// upstream-wide or the model's) had no room.
	RequestBreaches     int64 `json:"request_breaches"`
	TokenBreaches       int64 `json:"token_breaches"`
	ConcurrencyBreaches int64 `json:"concurrency_breaches"`
	// ModelBreaches counts, per model, the refusals in which one of that
	// model's own limits had no room.
	ModelBreaches map[string]int64 `json:"model_breaches,omitempty"`
	// InFlight and MaxInFlight are InFlight() and MaxInFlight(): every
	// request being answered, refused ones and invalid ones included.
	InFlight    int `json:"in_flight"`
	MaxInFlight int `json:"max_in_flight"`
	// Concurrent is the number of admitted requests in flight (what the
	// concurrency limits are checked against) and MaxConcurrent its
	// high-water mark since New or Reset.
	Concurrent    int `json:"concurrent"`
	MaxConcurrent int `json:"max_concurrent"`
}

// entry is one charge in a window: at (limiter clock) and amount.
type entry struct{ at, n int64 }

// window is the charges of one dimension still inside the sliding window,
// oldest first, in a ring that grows by doubling (its size is bounded by
// the limit: every entry is at least 1).
type window struct {
	buf  []entry // len is 0 or a power of two
	head int
	size int
	sum  int64
}

func (w *window) get(i int) entry { return w.buf[(w.head+i)&(len(w.buf)-1)] }

func (w *window) push(at, n int64) {
	if w.size == len(w.buf) {
		nb := make([]entry, max(8, 2*len(w.buf)))
		for i := range w.size {
			nb[i] = w.get(i)
		}
		w.buf, w.head = nb, 0
	}
	w.buf[(w.head+w.size)&(len(w.buf)-1)] = entry{at, n}
	w.size++
	w.sum += n
}

// prune drops the charges made at or before cut.
func (w *window) prune(cut int64) {
	for w.size > 0 {
		e := w.buf[w.head]
		if e.at > cut {
			return
		}
		w.sum -= e.n
		w.head = (w.head + 1) & (len(w.buf) - 1)
		w.size--
	}
}

// inWindow returns the sum of the charges made after cut and when the
// newest was made, without dropping the older ones.
func (w *window) inWindow(cut int64) (sum, newest int64) {
	sum = w.sum
	for i := range w.size {
		e := w.get(i)
		if e.at > cut {
			break
		}
		sum -= e.n
	}
	if w.size > 0 {
		newest = w.get(w.size - 1).at
	}
	return sum, newest
}

// readyAt returns when a charge of n fits under limit, the window being
// win long and already pruned; -1 if never (n > limit).
func (w *window) readyAt(limit, n, win int64) int64 {
	if n > limit {
		return -1
	}
	excess := w.sum + n - limit
	var freed int64
	for i := range w.size {
		e := w.get(i)
		if freed += e.n; freed >= excess {
			return e.at + win
		}
	}
	return -1
}

// scope is the state of the upstream-wide limits or of one model's.
type scope struct {
	req, tok window
	inFlight int
}

// sync prunes the windows of the limited dimensions and forgets those of
// the unlimited ones (a limit set later starts from an empty window).
func (s *scope) sync(requests, tokens, cut int64) {
	if requests > 0 {
		s.req.prune(cut)
	} else if s.req.buf != nil {
		s.req = window{}
	}
	if tokens > 0 {
		s.tok.prune(cut)
	} else if s.tok.buf != nil {
		s.tok = window{}
	}
}

type dimension uint8

const (
	dimRequests dimension = iota
	dimTokens
	dimConcurrency
)

var dimNames = [...]string{"requests", "tokens", "concurrency"}

// block is one limit that had no room for a request.
type block struct {
	dim         dimension
	model       bool
	limit, used int64
	need        int64
}

// name is the block as in Record.LimitedBy: "tokens", "model:requests"...
func (b block) name() string {
	if b.model {
		return "model:" + dimNames[b.dim]
	}
	return dimNames[b.dim]
}

// lease is an admitted request's hold on the concurrency counts.
type lease struct {
	l  *limiter
	ms *scope
}

func (ls lease) release() {
	if ls.l != nil {
		ls.l.release(ls.ms)
	}
}

// verdict is the limiter's answer to one request.
type verdict struct {
	ok    bool
	lease lease  // held if ok
	ms    *scope // the model's scope (for the rate-limit headers)
	first block  // if !ok: the first limit without room
	// readyAt (limiter clock) is when the refused request would fit; -1 if
	// unknown (a concurrency limit) or never (a charge above the limit).
	readyAt int64
	by      string // Record.LimitedBy
}

// maxIdleModels bounds the model scopes kept for models without limits of
// their own before idle ones are dropped.
const maxIdleModels = 1024

// limiter enforces ProviderLimits. Its clock is monotonic nanoseconds.
type limiter struct {
	clock func() int64

	mu            sync.Mutex
	all           scope
	models        map[string]*scope
	maxConcurrent int
	admitted      int64
	breaches      [len(dimNames)]int64
	breachesAll   int64
	modelBreaches map[string]int64
}

func newLimiter() *limiter {
	base := time.Now()
	return &limiter{
		// Offset so that the clock minus a window never wraps below zero
		// in practice and a zero entry time is never "now".
		clock:  func() int64 { return int64(time.Since(base)) + int64(24*time.Hour) },
		models: make(map[string]*scope),
	}
}

// scopeOf returns the scope of model, creating it (l.mu held).
func (l *limiter) scopeOf(model string, pl *ProviderLimits, cut int64) *scope {
	if ms := l.models[model]; ms != nil {
		return ms
	}
	if len(l.models) >= maxIdleModels {
		for name, ms := range l.models {
			ml := pl.Models[name]
			ms.sync(ml.Requests, ml.Tokens, cut)
			if ms.inFlight == 0 && ms.req.size == 0 && ms.tok.size == 0 {
				delete(l.models, name)
			}
		}
	}
	ms := &scope{}
	l.models[model] = ms
	return ms
}

// admit decides on a request for model charging tokens, at the limiter's
// clock now: admitted (charged on every limited dimension of both scopes
// and counted in flight) or refused (charged nothing).
func (l *limiter) admit(pl *ProviderLimits, model string, tokens int64) verdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock()
	win := int64(pl.Window)
	cut := now - win
	ml := pl.Models[model]
	ms := l.scopeOf(model, pl, cut)
	l.all.sync(pl.Requests, pl.Tokens, cut)
	ms.sync(ml.Requests, ml.Tokens, cut)

	v := verdict{ms: ms}
	var blocks [6]block
	nb := 0
	readyAt := int64(0)
	check := func(s *scope, requests, toks int64, conc int, model bool) {
		if requests > 0 && s.req.sum+1 > requests {
			blocks[nb] = block{dimRequests, model, requests, s.req.sum, 1}
			nb++
			if readyAt >= 0 {
				readyAt = max(readyAt, s.req.readyAt(requests, 1, win))
			}
		}
		if toks > 0 && s.tok.sum+tokens > toks {
			blocks[nb] = block{dimTokens, model, toks, s.tok.sum, tokens}
			nb++
			if r := s.tok.readyAt(toks, tokens, win); r < 0 || readyAt < 0 {
				readyAt = -1
			} else {
				readyAt = max(readyAt, r)
			}
		}
		if conc > 0 && s.inFlight+1 > conc {
			blocks[nb] = block{dimConcurrency, model, int64(conc), int64(s.inFlight), 1}
			nb++
			readyAt = -1
		}
	}
	check(&l.all, pl.Requests, pl.Tokens, pl.Concurrency, false)
	check(ms, ml.Requests, ml.Tokens, ml.Concurrency, true)

	if nb == 0 {
		for _, s := range [...]struct {
			s         *scope
			req, toks int64
		}{{&l.all, pl.Requests, pl.Tokens}, {ms, ml.Requests, ml.Tokens}} {
			if s.req > 0 {
				s.s.req.push(now, 1)
			}
			if s.toks > 0 && tokens > 0 {
				s.s.tok.push(now, tokens)
			}
			s.s.inFlight++
		}
		l.maxConcurrent = max(l.maxConcurrent, l.all.inFlight)
		l.admitted++
		v.ok, v.lease = true, lease{l, ms}
		return v
	}

	l.breachesAll++
	var seen [len(dimNames)]bool
	modelBlocked := false
	for i, b := range blocks[:nb] {
		if !seen[b.dim] {
			seen[b.dim] = true
			l.breaches[b.dim]++
		}
		modelBlocked = modelBlocked || b.model
		if i == 0 {
			v.by = b.name()
		} else {
			v.by += "," + b.name()
		}
	}
	if modelBlocked {
		if l.modelBreaches == nil {
			l.modelBreaches = make(map[string]int64)
		}
		l.modelBreaches[model]++
	}
	v.first, v.readyAt = blocks[0], readyAt
	return v
}

func (l *limiter) release(ms *scope) {
	l.mu.Lock()
	l.all.inFlight--
	ms.inFlight--
	l.mu.Unlock()
}

// stats fills the limiter's part of st.
func (l *limiter) stats(st *Stats) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st.Admitted = l.admitted
	st.Breaches = l.breachesAll
	st.RequestBreaches = l.breaches[dimRequests]
	st.TokenBreaches = l.breaches[dimTokens]
	st.ConcurrencyBreaches = l.breaches[dimConcurrency]
	st.ModelBreaches = maps.Clone(l.modelBreaches)
	st.Concurrent = l.all.inFlight
	st.MaxConcurrent = l.maxConcurrent
}

// resetStats zeroes the counters; the windows and the requests in flight
// are the provider's state and stay.
func (l *limiter) resetStats() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.admitted, l.breachesAll, l.breaches, l.modelBreaches = 0, 0, [len(dimNames)]int64{}, nil
	l.maxConcurrent = l.all.inFlight
}

// headerDim is what the rate-limit headers say of one dimension.
type headerDim struct {
	set              bool
	limit, remaining int64
	reset            time.Duration // until every current charge has left the window
}

// rateHeaders computes the rate-limit headers now: per dimension, the
// upstream-wide values or, when its remaining is lower, the model's.
func (l *limiter) rateHeaders(pl *ProviderLimits, model string, ms *scope) (req, tok headerDim) {
	ml := pl.Models[model]
	if pl.Requests == 0 && pl.Tokens == 0 && ml.Requests == 0 && ml.Tokens == 0 {
		return req, tok
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock()
	win := int64(pl.Window)
	cut := now - win
	dim := func(w *window, limit int64, h *headerDim) {
		if limit <= 0 {
			return
		}
		used, newest := w.inWindow(cut)
		d := headerDim{set: true, limit: limit, remaining: max(limit-used, 0)}
		if used > 0 {
			d.reset = time.Duration(max(newest+win-now, 0))
		}
		if !h.set || d.remaining < h.remaining {
			*h = d
		}
	}
	dim(&l.all.req, pl.Requests, &req)
	dim(&ms.req, ml.Requests, &req)
	dim(&l.all.tok, pl.Tokens, &tok)
	dim(&ms.tok, ml.Tokens, &tok)
	return req, tok
}

// setRateHeaders sets the provider's rate-limit headers on the response.
func (s *Server) setRateHeaders(ctx *fasthttp.RequestCtx, anthropic bool, o *Options, model string, ms *scope) {
	req, tok := s.lim.rateHeaders(&o.Limits, model, ms)
	if !req.set && !tok.set {
		return
	}
	h := &ctx.Response.Header
	buf := make([]byte, 0, 40)
	wall := time.Now()
	set := func(d headerDim, limitName, remainingName, resetName string) {
		if !d.set {
			return
		}
		buf = strconv.AppendInt(buf[:0], d.limit, 10)
		h.SetBytesV(limitName, buf)
		buf = strconv.AppendInt(buf[:0], d.remaining, 10)
		h.SetBytesV(remainingName, buf)
		reset := ceilMS(d.reset)
		if anthropic {
			at := wall.Add(d.reset)
			if r := at.Truncate(time.Millisecond); r.Before(at) {
				at = r.Add(time.Millisecond)
			} else {
				at = r
			}
			buf = at.UTC().AppendFormat(buf[:0], "2006-01-02T15:04:05.000Z07:00")
		} else {
			buf = append(buf[:0], reset.String()...)
		}
		h.SetBytesV(resetName, buf)
	}
	if anthropic {
		set(req, "anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset")
		set(tok, "anthropic-ratelimit-tokens-limit", "anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset")
	} else {
		set(req, "x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests")
		set(tok, "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens")
	}
}

// ceilMS rounds d up to a whole number of milliseconds.
func ceilMS(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}

// retryAfter returns the seconds (rounded up) until a refused request
// would fit, or -1 if unknown or never.
func (s *Server) retryAfter(v *verdict) int64 {
	if v.readyAt < 0 {
		return -1
	}
	d := v.readyAt - s.lim.clock()
	if d <= 0 {
		return 0
	}
	return (d + int64(time.Second) - 1) / int64(time.Second)
}

// writeRateLimited answers a request refused by the limits: 429 in the
// provider's error shape, with retry-after and the rate-limit headers.
func (s *Server) writeRateLimited(ctx *fasthttp.RequestCtx, anthropic bool, o *Options, model string, v *verdict) {
	b := v.first
	scope := ""
	if b.model {
		scope = " for model " + strconv.Quote(model)
	}
	var msg string
	switch {
	case b.dim == dimConcurrency:
		msg = fmt.Sprintf("Concurrency limit reached%s: Limit %d, In flight %d.", scope, b.limit, b.used)
	case b.need > b.limit:
		msg = fmt.Sprintf("Request too large%s on %s per %v: Limit %d, Requested %d.", scope, dimNames[b.dim], o.Limits.Window, b.limit, b.need)
	default:
		msg = fmt.Sprintf("Rate limit reached%s on %s per %v: Limit %d, Used %d, Requested %d.", scope, dimNames[b.dim], o.Limits.Window, b.limit, b.used, b.need)
	}
	retry := s.retryAfter(v)
	if retry >= 0 {
		msg += " Please try again in " + strconv.FormatInt(retry, 10) + "s."
	}
	body := make([]byte, 0, 160+len(msg))
	if anthropic {
		body = append(body, `{"type":"error","error":{"type":"rate_limit_error","message":`...)
		body = appendJSONString(body, msg)
		body = append(body, "}}"...)
	} else {
		typ := "requests"
		if b.dim == dimTokens {
			typ = "tokens"
		}
		body = append(body, `{"error":{"message":`...)
		body = appendJSONString(body, msg)
		body = append(body, `,"type":"`...)
		body = append(body, typ...)
		body = append(body, `","param":null,"code":"rate_limit_exceeded"}}`...)
	}
	ctx.Response.Reset()
	ctx.SetStatusCode(fasthttp.StatusTooManyRequests)
	ctx.SetContentType(ctJSON)
	if retry >= 0 {
		ctx.Response.Header.Set("retry-after", strconv.FormatInt(retry, 10))
	}
	s.setRateHeaders(ctx, anthropic, o, model, v.ms)
	ctx.SetBody(body)
}
