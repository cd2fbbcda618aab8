package fakeupstream

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// fakeClock is an injectable limiter clock (monotonic nanoseconds).
type fakeClock struct{ t atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.t.Store(int64(24 * time.Hour))
	return c
}

func (c *fakeClock) now() int64              { return c.t.Load() }
func (c *fakeClock) advance(d time.Duration) { c.t.Add(int64(d)) }

// startClocked is start with the limiter on clock c.
func startClocked(t *testing.T, o Options, c *fakeClock) (*Server, string) {
	t.Helper()
	s := New(o)
	s.lim.clock = c.now
	addr, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s, "http://" + addr
}

func limited(l ProviderLimits) Options {
	o := fixed(3)
	o.Limits = l
	return o
}

// TestWindowExact drives the limiter on a fake clock through fixed
// scenarios: the window is half-open, (t-Window, t], and retry times are
// exact.
func TestWindowExact(t *testing.T) {
	const ms = time.Millisecond
	type step struct {
		after  time.Duration // clock advance before the request
		model  string
		charge int64
		ok     bool
		ready  time.Duration // if !ok: readyAt relative to the first request; -1 = none
		by     string
	}
	tests := []struct {
		name   string
		limits ProviderLimits
		steps  []step
	}{
		{"requests", ProviderLimits{Window: time.Second, Requests: 3}, []step{
			{0, "", 0, true, 0, ""},
			{100 * ms, "", 0, true, 0, ""},
			{100 * ms, "", 0, true, 0, ""},
			{0, "", 0, false, 1000 * ms, "requests"},
			{799 * ms, "", 0, false, 1000 * ms, "requests"}, // at 999ms: the first is still in
			{ms, "", 0, true, 0, ""},                        // at 1000ms it has left
			{0, "", 0, false, 1100 * ms, "requests"},
			{100 * ms, "", 0, true, 0, ""}, // 1100ms
			{100 * ms, "", 0, true, 0, ""}, // 1200ms: the third (200ms) left
			{0, "", 0, false, 2000 * ms, "requests"},
		}},
		{"tokens", ProviderLimits{Window: time.Second, Tokens: 100}, []step{
			{0, "", 40, true, 0, ""},
			{100 * ms, "", 40, true, 0, ""},
			{100 * ms, "", 30, false, 1000 * ms, "tokens"}, // 110 > 100: the 40 at 0 must leave
			{0, "", 20, true, 0, ""},                       // exactly 100
			{0, "", 0, true, 0, ""},                        // a zero charge always fits
			{0, "", 1, false, 1000 * ms, "tokens"},
			{0, "", 90, false, 1200 * ms, "tokens"}, // needs the 40s and the 20 to leave
			{0, "", 101, false, -1, "tokens"},       // never fits
			{800 * ms, "", 40, true, 0, ""},         // 1000ms: the first 40 left
		}},
		{"both dimensions", ProviderLimits{Window: time.Second, Requests: 2, Tokens: 50}, []step{
			{0, "", 30, true, 0, ""},
			{500 * ms, "", 10, true, 0, ""},
			{0, "", 20, false, 1000 * ms, "requests,tokens"},
			{0, "", 0, false, 1000 * ms, "requests"},
		}},
		{"models", ProviderLimits{Window: time.Second, Requests: 3, Models: map[string]ModelLimits{"a": {Requests: 1}, "b": {Tokens: 10}}}, []step{
			{0, "a", 5, true, 0, ""},
			{100 * ms, "a", 5, false, 1000 * ms, "model:requests"},
			{0, "b", 6, true, 0, ""},
			{100 * ms, "b", 6, false, 1100 * ms, "model:tokens"},
			{0, "c", 100, true, 0, ""}, // no limits of its own; the upstream's third
			{0, "c", 0, false, 1000 * ms, "requests"},
			{0, "a", 0, false, 1000 * ms, "requests,model:requests"},
			{800 * ms, "a", 0, true, 0, ""}, // 1000ms
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeClock()
			l := newLimiter()
			l.clock = c.now
			pl := tc.limits.normalized()
			t0 := c.now()
			for i, st := range tc.steps {
				c.advance(st.after)
				v := l.admit(&pl, st.model, st.charge)
				if v.ok {
					v.lease.release()
				}
				if v.ok != st.ok || v.by != st.by {
					t.Fatalf("step %d: ok %v by %q, want %v %q", i, v.ok, v.by, st.ok, st.by)
				}
				if st.ok {
					continue
				}
				want := int64(-1)
				if st.ready >= 0 {
					want = t0 + int64(st.ready)
				}
				if v.readyAt != want {
					t.Fatalf("step %d: readyAt %v, want %v", i, time.Duration(v.readyAt-t0), st.ready)
				}
			}
		})
	}
}

// TestWindowProperty checks the limiter against a brute-force model on
// random arrivals: a request is admitted exactly when every window ending
// at its arrival has room (upstream-wide and its model's), and readyAt is
// exactly the first time it would fit. Limits change mid-run.
func TestWindowProperty(t *testing.T) {
	const W = 1000
	type adm struct {
		at, n int64
		model string
	}
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		c := newFakeClock()
		l := newLimiter()
		l.clock = c.now
		pl := ProviderLimits{Window: W, Requests: 8, Tokens: 300, Models: map[string]ModelLimits{
			"a": {Requests: 3, Tokens: 100},
			"b": {Tokens: 150},
		}}.normalized()
		var admitted []adm
		fits := func(t, n int64, model string) bool {
			var reqs, toks, mreqs, mtoks int64
			for _, a := range admitted {
				if a.at > t-W {
					reqs, toks = reqs+1, toks+a.n
					if a.model == model {
						mreqs, mtoks = mreqs+1, mtoks+a.n
					}
				}
			}
			ml := pl.Models[model]
			return (pl.Requests == 0 || reqs+1 <= pl.Requests) && (pl.Tokens == 0 || toks+n <= pl.Tokens) &&
				(ml.Requests == 0 || mreqs+1 <= ml.Requests) && (ml.Tokens == 0 || mtoks+n <= ml.Tokens)
		}
		for i := range 600 {
			if i == 300 { // halve the limits mid-run
				pl = ProviderLimits{Window: W, Requests: 4, Tokens: 150, Models: map[string]ModelLimits{
					"a": {Requests: 2, Tokens: 50},
					"b": {Tokens: 75},
				}}.normalized()
			}
			c.advance(time.Duration(rng.IntN(120)))
			now := c.now()
			model := [...]string{"a", "b", "c"}[rng.IntN(3)]
			n := int64(rng.IntN(60))
			if rng.IntN(50) == 0 {
				n = 400 // over every limit
			}
			want := fits(now, n, model)
			v := l.admit(&pl, model, n)
			if v.ok != want {
				t.Fatalf("seed %d step %d: admit %v, brute force %v", seed, i, v.ok, want)
			}
			if v.ok {
				v.lease.release()
				admitted = append(admitted, adm{now, n, model})
				continue
			}
			// The first time it fits is one of the times a charge leaves.
			var cands []int64
			for _, a := range admitted {
				if a.at+W > now {
					cands = append(cands, a.at+W)
				}
			}
			sort.Slice(cands, func(i, j int) bool { return cands[i] < cands[j] })
			ready := int64(-1)
			for _, ct := range cands {
				if fits(ct, n, model) {
					ready = ct
					break
				}
			}
			if v.readyAt != ready {
				t.Fatalf("seed %d step %d: readyAt %d, brute force %d (now %d)", seed, i, v.readyAt, ready, now)
			}
		}
		var st Stats
		l.stats(&st)
		if st.Admitted != int64(len(admitted)) || st.Admitted+st.Breaches != 600 || st.Concurrent != 0 {
			t.Fatalf("seed %d: stats %+v, %d admitted", seed, st, len(admitted))
		}
	}
}

// TestRateLimited429 checks the 429 of each kind: status, error shape,
// retry-after, the rate-limit headers, the record and the breach count.
func TestRateLimited429(t *testing.T) {
	tests := []struct {
		name, path, body string
		anthropic        bool
	}{
		{"chat", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"1234"}]}`, false},
		{"chat stream", "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"1234"}]}`, false},
		{"completions", "/v1/completions", `{"model":"m","prompt":"1234"}`, false},
		{"embeddings", "/v1/embeddings", `{"model":"m","input":"1234"}`, false},
		{"messages", "/v1/messages", `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"1234"}]}`, true},
		{"messages stream", "/v1/messages", `{"model":"m","stream":true,"messages":[{"role":"user","content":"1234"}]}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeClock()
			s, base := startClocked(t, limited(ProviderLimits{Window: 3 * time.Second, Requests: 2, Tokens: 100}), c)
			for range 2 {
				if r := post(t, base+tc.path, tc.body); r.status != 200 {
					t.Fatalf("status %d: %s", r.status, r.body)
				}
			}
			c.advance(1200 * time.Millisecond)
			r := post(t, base+tc.path, tc.body)
			if r.status != 429 {
				t.Fatalf("status %d, want 429: %s", r.status, r.body)
			}
			j := gjson.ParseBytes(r.body)
			if tc.anthropic {
				expect(t, j, "type", "error")
				expect(t, j, "error.type", "rate_limit_error")
			} else {
				expect(t, j, "error.type", "requests")
				expect(t, j, "error.code", "rate_limit_exceeded")
			}
			msg := j.Get("error.message").String()
			if !strings.Contains(msg, "Limit 2, Used 2") {
				t.Errorf("message %q", msg)
			}
			// The first two left at 3s: 1.8s from now, rounded up.
			if got := r.header.Get("Retry-After"); got != "2" {
				t.Errorf("retry-after %q, want 2", got)
			}
			checkRateHeaders(t, r.header, tc.anthropic, "requests", 2, 0, 1800*time.Millisecond)
			checkRateHeaders(t, r.header, tc.anthropic, "tokens", 100, 98, 1800*time.Millisecond)
			recs := s.Records()
			if len(recs) != 3 || recs[0].RateLimited || !recs[2].RateLimited || recs[2].LimitedBy != "requests" ||
				recs[2].Status != 429 || recs[2].TokenCharge != 1 {
				t.Errorf("records %+v", recs)
			}
			if st := s.Stats(); s.Breaches() != 1 || st.RequestBreaches != 1 || st.TokenBreaches != 0 || st.Admitted != 2 {
				t.Errorf("stats %+v", st)
			}
			// Not yet at 2999ms; admitted at 3s.
			c.advance(1799 * time.Millisecond)
			if r := post(t, base+tc.path, tc.body); r.status != 429 || r.header.Get("Retry-After") != "1" {
				t.Fatalf("at 2.999s: %d retry-after %q", r.status, r.header.Get("Retry-After"))
			}
			c.advance(time.Millisecond)
			if r := post(t, base+tc.path, tc.body); r.status != 200 {
				t.Fatalf("at 3s: %d %s", r.status, r.body)
			}
		})
	}
}

// checkRateHeaders checks the rate-limit headers of one dimension.
func checkRateHeaders(t *testing.T, h http.Header, anthropic bool, dim string, limit, remaining int64, reset time.Duration) {
	t.Helper()
	var lim, rem, rst string
	if anthropic {
		lim = h.Get("anthropic-ratelimit-" + dim + "-limit")
		rem = h.Get("anthropic-ratelimit-" + dim + "-remaining")
		rst = h.Get("anthropic-ratelimit-" + dim + "-reset")
	} else {
		lim = h.Get("x-ratelimit-limit-" + dim)
		rem = h.Get("x-ratelimit-remaining-" + dim)
		rst = h.Get("x-ratelimit-reset-" + dim)
	}
	if lim != strconv.FormatInt(limit, 10) || rem != strconv.FormatInt(remaining, 10) {
		t.Errorf("%s: limit %q remaining %q, want %d %d", dim, lim, rem, limit, remaining)
	}
	if !anthropic {
		if rst != reset.String() {
			t.Errorf("%s: reset %q, want %q", dim, rst, reset)
		}
		return
	}
	at, err := time.Parse(time.RFC3339, rst)
	if err != nil {
		t.Errorf("%s: reset %q: %v", dim, rst, err)
		return
	}
	if d := time.Until(at); d > reset+time.Millisecond || d < reset-2*time.Second {
		t.Errorf("%s: reset %q is %v from now, want about %v", dim, rst, d, reset)
	}
}

// TestTokenCharge checks what each kind charges, the tokens 429 and the
// token headers on success.
func TestTokenCharge(t *testing.T) {
	tests := []struct {
		name, path, body string
		charge           int64
	}{
		// "12345678" is 2 prompt tokens for the default counter.
		{"chat no max", "/v1/chat/completions", `{"messages":[{"role":"user","content":"12345678"}]}`, 2},
		{"chat max_tokens", "/v1/chat/completions", `{"max_tokens":30,"messages":[{"role":"user","content":"12345678"}]}`, 32},
		{"chat max_completion_tokens first", "/v1/chat/completions", `{"max_completion_tokens":20,"max_tokens":30,"messages":[{"role":"user","content":"12345678"}]}`, 22},
		{"chat negative", "/v1/chat/completions", `{"max_tokens":-5,"messages":[{"role":"user","content":"12345678"}]}`, 2},
		{"completions", "/v1/completions", `{"max_tokens":10,"prompt":"12345678"}`, 12},
		{"embeddings", "/v1/embeddings", `{"max_tokens":10,"input":["12345678","1234"]}`, 3},
		{"messages", "/v1/messages", `{"max_tokens":40,"system":"1234","messages":[{"role":"user","content":"12345678"}]}`, 43},
		{"messages stream", "/v1/messages", `{"stream":true,"max_tokens":40,"max_completion_tokens":5,"messages":[{"role":"user","content":"12345678"}]}`, 42},
	}
	const limit = 100
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeClock()
			s, base := startClocked(t, limited(ProviderLimits{Window: 2 * time.Second, Tokens: limit}), c)
			anthropic := tc.path == "/v1/messages"
			var used int64
			for used+tc.charge <= limit {
				r := post(t, base+tc.path, tc.body)
				if r.status != 200 {
					t.Fatalf("after %d charged: %d %s", used, r.status, r.body)
				}
				used += tc.charge
				checkRateHeaders(t, r.header, anthropic, "tokens", limit, limit-used, 2*time.Second)
				if r.header.Get("x-ratelimit-limit-requests") != "" || r.header.Get("anthropic-ratelimit-requests-limit") != "" {
					t.Errorf("requests headers without a requests limit: %v", r.header)
				}
				c.advance(10 * time.Millisecond)
			}
			r := post(t, base+tc.path, tc.body)
			if r.status != 429 {
				t.Fatalf("over the limit: %d %s", r.status, r.body)
			}
			j := gjson.ParseBytes(r.body)
			if !anthropic {
				expect(t, j, "error.type", "tokens")
			}
			if !strings.Contains(j.Get("error.message").String(), fmt.Sprintf("Requested %d", tc.charge)) {
				t.Errorf("message %s", r.body)
			}
			if got := r.header.Get("Retry-After"); got != "2" {
				t.Errorf("retry-after %q", got)
			}
			recs := s.Records()
			for i, rec := range recs {
				if rec.TokenCharge != tc.charge || rec.RateLimited != (i == len(recs)-1) {
					t.Errorf("record %d: %+v", i, rec)
				}
			}
			if recs[len(recs)-1].LimitedBy != "tokens" {
				t.Errorf("LimitedBy %q", recs[len(recs)-1].LimitedBy)
			}
		})
	}

	// A request over the limit by itself never fits: no retry-after.
	_, base := startClocked(t, limited(ProviderLimits{Window: time.Second, Tokens: 10}), newFakeClock())
	r := post(t, base+"/v1/chat/completions", `{"max_tokens":11,"messages":[]}`)
	if r.status != 429 || r.header.Get("Retry-After") != "" || !strings.Contains(string(r.body), "Request too large") {
		t.Errorf("too large: %d retry-after %q %s", r.status, r.header.Get("Retry-After"), r.body)
	}
}

// TestModelLimits: per-model limits, charged on all or none, and headers
// reporting the tighter of the model's and the upstream's.
func TestModelLimits(t *testing.T) {
	c := newFakeClock()
	s, base := startClocked(t, limited(ProviderLimits{Window: 2 * time.Second, Requests: 4, Tokens: 1000, Models: map[string]ModelLimits{
		"small": {Requests: 1, Tokens: 50},
		"mid":   {Tokens: 100},
	}}), c)
	body := func(model string, maxTokens int) string {
		return fmt.Sprintf(`{"model":%q,"max_tokens":%d,"messages":[]}`, model, maxTokens)
	}
	type call struct {
		model     string
		maxTokens int
		status    int
		by        string
		// headers: requests limit/remaining, tokens limit/remaining
		reqLim, reqRem, tokLim, tokRem int64
	}
	calls := []call{
		{"small", 10, 200, "", 1, 0, 50, 40}, // the model's are tighter in both
		{"small", 10, 429, "model:requests", 1, 0, 50, 40},
		{"mid", 60, 200, "", 4, 2, 100, 40},             // upstream requests (2 left), model tokens (40 left)
		{"mid", 60, 429, "model:tokens", 4, 2, 100, 40}, // charged nothing upstream
		{"big", 900, 200, "", 4, 1, 1000, 30},
		{"big", 0, 200, "", 4, 0, 1000, 30},
		{"big", 0, 429, "requests", 4, 0, 1000, 30},
		// Equal remaining: the upstream's values.
		{"small", 100, 429, "requests,tokens,model:requests,model:tokens", 4, 0, 1000, 30},
	}
	for i, cl := range calls {
		r := post(t, base+"/v1/chat/completions", body(cl.model, cl.maxTokens))
		if r.status != cl.status {
			t.Fatalf("call %d (%s): status %d, want %d: %s", i, cl.model, r.status, cl.status, r.body)
		}
		checkRateHeaders(t, r.header, false, "requests", cl.reqLim, cl.reqRem, 2*time.Second)
		checkRateHeaders(t, r.header, false, "tokens", cl.tokLim, cl.tokRem, 2*time.Second)
		recs := s.Records()
		if rec := recs[len(recs)-1]; rec.LimitedBy != cl.by || rec.RateLimited != (cl.status == 429) {
			t.Errorf("call %d: record %+v, want LimitedBy %q", i, rec, cl.by)
		}
	}
	st := s.Stats()
	if st.Admitted != 4 || st.Breaches != 4 || st.RequestBreaches != 3 || st.TokenBreaches != 2 ||
		st.ModelBreaches["small"] != 2 || st.ModelBreaches["mid"] != 1 || st.ModelBreaches["big"] != 0 {
		t.Errorf("stats %+v", st)
	}
	c.advance(2 * time.Second)
	if r := post(t, base+"/v1/chat/completions", body("small", 50)); r.status != 200 {
		t.Errorf("after the window: %d %s", r.status, r.body)
	}
}

// TestConcurrencyLimit: streams hold their slot until they end or are cut;
// the upstream-wide and the per-model limits.
func TestConcurrencyLimit(t *testing.T) {
	tests := []struct {
		name     string
		limits   ProviderLimits
		model    string // of the streams
		other    string // a model that must still be admitted while full
		by       string
		admitted bool // whether other is admitted
	}{
		{"upstream", ProviderLimits{Concurrency: 2}, "m", "x", "concurrency", false},
		{"model", ProviderLimits{Concurrency: 5, Models: map[string]ModelLimits{"m": {Concurrency: 2}}}, "m", "x", "model:concurrency", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := fixed(100_000_000) // streams that never end by themselves
			o.ChunkInterval = 10 * time.Millisecond
			o.Limits = tc.limits
			s, base := start(t, o)
			stream := fmt.Sprintf(`{"model":%q,"stream":true,"messages":[]}`, tc.model)
			var resps []*http.Response
			for range 2 {
				resp := openStream(t, base+"/v1/chat/completions", stream)
				if _, err := readEvent(bufio.NewReader(resp.Body)); err != nil {
					t.Fatal(err)
				}
				resps = append(resps, resp)
			}
			for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
				r := post(t, base+path, stream)
				if r.status != 429 || r.header.Get("Retry-After") != "" || !strings.Contains(string(r.body), "Concurrency limit reached") {
					t.Fatalf("%s: third stream: %d retry-after %q %s", path, r.status, r.header.Get("Retry-After"), r.body)
				}
			}
			recs := s.Records()
			if rec := recs[len(recs)-1]; rec.LimitedBy != tc.by {
				t.Errorf("LimitedBy %q, want %q", rec.LimitedBy, tc.by)
			}
			other := post(t, base+"/v1/embeddings", fmt.Sprintf(`{"model":%q,"input":"x"}`, tc.other))
			if (other.status == 200) != tc.admitted {
				t.Errorf("model %s while full: %d", tc.other, other.status)
			}
			maxConc := 2
			if tc.admitted {
				maxConc = 3 // the other model's request
			}
			if st := s.Stats(); st.Concurrent != 2 || st.MaxConcurrent != maxConc || st.ConcurrencyBreaches < 2 {
				t.Errorf("stats %+v", st)
			}
			resps[0].Body.Close()
			eventually(t, "a slot freed", func() bool { return s.Stats().Concurrent == 1 })
			resp := openStream(t, base+"/v1/chat/completions", stream)
			resps = append(resps[1:], resp)
			for _, resp := range resps {
				resp.Body.Close()
			}
			eventually(t, "no stream in flight", func() bool { return s.Stats().Concurrent == 0 })
			if st := s.Stats(); st.MaxConcurrent != maxConc {
				t.Errorf("MaxConcurrent %d", st.MaxConcurrent)
			}
		})
	}
}

// TestConcurrencyOneSequential: a client that sends its next request only
// after the whole previous answer never breaches a concurrency limit of 1
// (the slot is freed before the last write).
func TestConcurrencyOneSequential(t *testing.T) {
	o := Options{CompletionMin: 1, CompletionMax: 10}
	o.Limits = ProviderLimits{Concurrency: 1, Models: map[string]ModelLimits{"m": {Concurrency: 1}}}
	s, base := start(t, o)
	c := &fasthttp.Client{}
	bodies := []string{`{"model":"m","messages":[]}`, `{"model":"m","stream":true,"messages":[]}`}
	paths := []string{"/v1/chat/completions", "/v1/messages", "/v1/completions"}
	for i := range 120 {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI(base + paths[i%len(paths)])
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetBodyString(bodies[i/len(paths)%len(bodies)])
		if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
			t.Fatalf("request %d: %v %d %s", i, err, resp.StatusCode(), resp.Body())
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
	if st := s.Stats(); st.Breaches != 0 || st.Admitted != 120 || st.MaxConcurrent != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSetOptionsMidRun: halving the limits applies at once to what is
// already in the window, through SetOptions, SetLimits and POST /_limits.
func TestSetOptionsMidRun(t *testing.T) {
	const ms = time.Millisecond
	c := newFakeClock()
	o := limited(ProviderLimits{Window: time.Second, Requests: 10})
	s, base := startClocked(t, o, c)
	chat := func() response { return post(t, base+"/v1/chat/completions", `{"messages":[]}`) }
	for range 6 { // at 0, 100, ..., 500ms
		if r := chat(); r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		c.advance(100 * ms)
	}
	// 600ms: 6 in the window; halve to 5: two must leave, the second at
	// 100ms leaves at 1100ms.
	o.Limits.Requests = 5
	s.SetOptions(o)
	r := chat()
	if r.status != 429 || r.header.Get("Retry-After") != "1" {
		t.Fatalf("after halving: %d %q", r.status, r.header.Get("Retry-After"))
	}
	checkRateHeaders(t, r.header, false, "requests", 5, 0, 900*ms) // the newest (500ms) leaves at 1500ms
	c.advance(499 * ms)
	if r := chat(); r.status != 429 {
		t.Fatalf("at 1099ms: %d", r.status)
	}
	c.advance(ms)
	if r := chat(); r.status != 200 { // 1100ms: 200..500 and this one
		t.Fatalf("at 1100ms: %d %s", r.status, r.body)
	}
	// Halve again through the control endpoint; the completion sequence
	// and the other options stay.
	r = post(t, base+"/_limits", `{"window":"1s","requests":2}`)
	if r.status != 200 || gjson.GetBytes(r.body, "requests").Int() != 2 || gjson.GetBytes(r.body, "window").String() != "1s" {
		t.Fatalf("POST /_limits: %d %s", r.status, r.body)
	}
	if got := s.Limits(); got.Requests != 2 || got.Window != time.Second || s.opts.Load().CompletionMin != 3 {
		t.Fatalf("limits %+v, options %+v", got, s.opts.Load())
	}
	if r := chat(); r.status != 429 || !strings.Contains(string(r.body), "Limit 2, Used 5") {
		t.Fatalf("after POST /_limits: %d %s", r.status, r.body)
	}
	// Raising it lets requests in at once.
	s.SetLimits(ProviderLimits{Window: time.Second, Requests: 7})
	for i := range 2 {
		if r := chat(); r.status != 200 {
			t.Fatalf("after raising, request %d: %d", i, r.status)
		}
	}
	if r := chat(); r.status != 429 {
		t.Fatalf("above the raised limit: %d", r.status)
	}
	// Removing the limit forgets the window; setting it again starts empty.
	s.SetLimits(ProviderLimits{})
	if r := chat(); r.status != 200 || r.header.Get("x-ratelimit-limit-requests") != "" {
		t.Fatalf("without limits: %d %v", r.status, r.header)
	}
	s.SetLimits(ProviderLimits{Window: time.Second, Requests: 1})
	if r := chat(); r.status != 200 {
		t.Fatalf("limit set afresh: %d", r.status)
	}
	for _, bad := range []string{`{"window":"soon"}`, `{"window":true}`, `[`} {
		if r := post(t, base+"/_limits", bad); r.status != 400 {
			t.Errorf("POST /_limits %s: %d", bad, r.status)
		}
	}
	if r := do(t, http.MethodDelete, base+"/_limits", "", nil); r.status != 405 {
		t.Errorf("DELETE /_limits: %d", r.status)
	}
}

// TestZeroLimitsUnchanged: without limits nothing is refused and no
// rate-limit header is sent.
func TestZeroLimitsUnchanged(t *testing.T) {
	s, base := start(t, fixed(2))
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				for _, p := range []string{"/v1/chat/completions", "/v1/messages", "/v1/embeddings"} {
					resp, err := client.Post(base+p, "application/json", strings.NewReader(`{"model":"m","max_tokens":100000,"input":"x","messages":[]}`))
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						t.Errorf("%s: %d", p, resp.StatusCode)
					}
					for k := range resp.Header {
						if k := strings.ToLower(k); strings.Contains(k, "ratelimit") || k == "retry-after" {
							t.Errorf("%s: header %s without limits", p, k)
						}
					}
				}
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	if st.Breaches != 0 || st.Admitted != 300 || st.MaxConcurrent < 1 || st.MaxInFlight < st.MaxConcurrent {
		t.Errorf("stats %+v", st)
	}
	for _, rec := range mustRecords(t, base) {
		if rec.RateLimited || rec.LimitedBy != "" || rec.Status != 200 {
			t.Fatalf("record %+v", rec)
		}
	}
	if l := s.Limits(); l.Requests != 0 || l.Tokens != 0 || l.Concurrency != 0 || l.Models != nil {
		t.Errorf("limits %+v", l)
	}
}

// TestConcurrentExactCount: concurrent requests against a long window admit
// exactly Requests of them.
func TestConcurrentExactCount(t *testing.T) {
	const limit, n = 17, 60
	s, base := start(t, limited(ProviderLimits{Window: time.Hour, Requests: limit}))
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			p := []string{"/v1/chat/completions", "/v1/messages"}[i%2]
			resp, err := client.Post(base+p, "application/json", strings.NewReader(`{"stream":true,"messages":[]}`))
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case 200:
				ok.Add(1)
			case 429:
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	if ok.Load() != limit || refused.Load() != n-limit || s.Breaches() != n-limit {
		t.Fatalf("%d admitted, %d refused, %d breaches", ok.Load(), refused.Load(), s.Breaches())
	}
}

// TestRealWindow: a real 2s window; the retry-after is truthful (the first
// admission after the refusal comes no earlier than a window after the
// first arrival, and no later than retry-after plus the polling) and GET
// /_stats reports the counters.
func TestRealWindow(t *testing.T) {
	const win = 2 * time.Second
	s, base := start(t, limited(ProviderLimits{Window: win, Requests: 3}))
	sent := time.Now() // before the first arrival
	for range 3 {
		if r := post(t, base+"/v1/messages", `{"messages":[]}`); r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	r := post(t, base+"/v1/messages", `{"messages":[]}`)
	refusedAt := time.Now()
	retry, err := strconv.Atoi(r.header.Get("Retry-After"))
	if r.status != 429 || err != nil || retry < 1 || retry > 2 {
		t.Fatalf("fourth: %d retry-after %q", r.status, r.header.Get("Retry-After"))
	}
	var admittedAt time.Time
	eventually(t, "a request admitted again", func() bool {
		time.Sleep(20 * time.Millisecond)
		r := post(t, base+"/v1/messages", `{"messages":[]}`)
		admittedAt = time.Now()
		return r.status == 200
	})
	if d := admittedAt.Sub(sent); d < win {
		t.Fatalf("admitted again %v after the first request, within the window", d)
	}
	if d := admittedAt.Sub(refusedAt); d > time.Duration(retry)*time.Second+500*time.Millisecond {
		t.Errorf("admitted again %v after a refusal saying retry after %ds", d, retry)
	}
	r = do(t, http.MethodGet, base+"/_stats", "", nil)
	var st Stats
	if err := json.Unmarshal(r.body, &st); r.status != 200 || err != nil {
		t.Fatalf("GET /_stats: %d %v %s", r.status, err, r.body)
	}
	if st.Admitted != 4 || st.Breaches < 1 || st.Breaches != int64(s.Breaches()) || st.RequestBreaches != st.Breaches || st.MaxInFlight < 1 {
		t.Errorf("stats %+v", st)
	}
	if r := post(t, base+"/_stats", ""); r.status != 405 {
		t.Errorf("POST /_stats: %d", r.status)
	}
	if r := post(t, base+"/_reset", ""); r.status != 200 || s.Stats().Breaches != 0 || s.Stats().Admitted != 0 {
		t.Errorf("after /_reset: %+v", s.Stats())
	}
}

// TestLimitsBypass: Status overrides and invalid requests are not subject to
// the limits and charge nothing.
func TestLimitsBypass(t *testing.T) {
	c := newFakeClock()
	o := limited(ProviderLimits{Window: time.Second, Requests: 1})
	s, base := startClocked(t, o, c)
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/chat/completions", `not json`},
		{"POST", "/v1/nothing", `{}`},
		{"GET", "/v1/messages", ``},
	} {
		if r := do(t, tc.method, base+tc.path, tc.body, nil); r.status == 200 || r.status == 429 {
			t.Errorf("%s %s: %d", tc.method, tc.path, r.status)
		}
	}
	o.Status = 503
	s.SetOptions(o)
	post(t, base+"/v1/chat/completions", `{}`)
	o.Status = 0
	s.SetOptions(o)
	if r := post(t, base+"/v1/chat/completions", `{}`); r.status != 200 {
		t.Fatalf("first valid request: %d %s", r.status, r.body)
	}
	if st := s.Stats(); st.Admitted != 1 || st.Breaches != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestProviderLimitsJSON(t *testing.T) {
	l := ProviderLimits{Window: 1500 * time.Millisecond, Requests: 3, Tokens: 4, Concurrency: 5, Models: map[string]ModelLimits{"m": {Requests: 1, Tokens: 2, Concurrency: 3}}}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"window":"1.5s","requests":3,"tokens":4,"concurrency":5,"models":{"m":{"requests":1,"tokens":2,"concurrency":3}}}`; string(b) != want {
		t.Errorf("marshal %s, want %s", b, want)
	}
	var back ProviderLimits
	if err := json.Unmarshal(b, &back); err != nil || fmt.Sprint(back) != fmt.Sprint(l) {
		t.Errorf("round trip %+v %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"window":2000000000}`), &back); err != nil || back.Window != 2*time.Second {
		t.Errorf("nanoseconds: %+v %v", back, err)
	}
	// Normalized: negatives cleared, default window, zero models dropped,
	// Models copied.
	models := map[string]ModelLimits{"z": {}, "n": {Requests: -1}, "k": {Tokens: 9}}
	s := New(Options{Limits: ProviderLimits{Requests: -3, Models: models}})
	defer s.Close()
	models["k"] = ModelLimits{Tokens: 1}
	if got := s.Limits(); got.Window != time.Minute || got.Requests != 0 || len(got.Models) != 1 || got.Models["k"].Tokens != 9 {
		t.Errorf("normalized %+v", got)
	}
}

func TestCLILimits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done := runCLI(t, func(w io.Writer) error {
		return Run(ctx, []string{"-listen", "127.0.0.1:0", "-rpm", "5", "-tpm", "1000", "-concurrency", "3",
			"-window", "1h", "-model-limit", "gpt=x=1/0/2", "-model-limit", "c=0/10/0"}, w)
	})
	base := "http://" + addr
	r := do(t, http.MethodGet, base+"/_limits", "", nil)
	var l ProviderLimits
	if err := json.Unmarshal(r.body, &l); err != nil {
		t.Fatalf("%v %s", err, r.body)
	}
	want := ProviderLimits{Window: time.Hour, Requests: 5, Tokens: 1000, Concurrency: 3, Models: map[string]ModelLimits{
		"gpt=x": {Requests: 1, Concurrency: 2}, "c": {Tokens: 10},
	}}
	if fmt.Sprint(l) != fmt.Sprint(want) {
		t.Errorf("limits %+v, want %+v", l, want)
	}
	if r := post(t, base+"/v1/chat/completions", `{"model":"gpt=x","messages":[]}`); r.status != 200 || r.header.Get("x-ratelimit-limit-requests") != "1" {
		t.Fatalf("%d %v", r.status, r.header)
	}
	if r := post(t, base+"/v1/chat/completions", `{"model":"gpt=x","messages":[]}`); r.status != 429 {
		t.Fatalf("second: %d", r.status)
	}
	if r := do(t, http.MethodGet, base+"/_stats", "", nil); gjson.GetBytes(r.body, "breaches").Int() != 1 || gjson.GetBytes(r.body, "admitted").Int() != 1 {
		t.Errorf("stats %s", r.body)
	}
	cancel()
	wait(t, done)

	for _, args := range [][]string{
		{"-rpm", "many"},
		{"-window", "soon"},
		{"-model-limit", "m"},
		{"-model-limit", "=1/2/3"},
		{"-model-limit", "m=1/2"},
		{"-model-limit", "m=1/-2/3"},
		{"-model-limit", "m=1/2/x"},
	} {
		if err := Run(context.Background(), args, io.Discard); err == nil {
			t.Errorf("Run(%q) succeeded", args)
		}
	}
}

// TestModelScopesBounded: the states of models without limits of their own
// are dropped when idle, so that many model names do not grow the limiter
// without bound; a model in flight or with charges in its window stays.
func TestModelScopesBounded(t *testing.T) {
	c := newFakeClock()
	l := newLimiter()
	l.clock = c.now
	pl := ProviderLimits{Window: time.Second, Concurrency: 10, Models: map[string]ModelLimits{"charged": {Requests: 5}, "busy": {Concurrency: 1}}}.normalized()
	busy := l.admit(&pl, "busy", 0)
	if v := l.admit(&pl, "charged", 0); v.ok {
		v.lease.release()
	}
	for i := range 3 * maxIdleModels {
		v := l.admit(&pl, "m"+strconv.Itoa(i), 1)
		if !v.ok {
			t.Fatalf("model %d refused: %s", i, v.by)
		}
		v.lease.release()
	}
	if n := len(l.models); n > maxIdleModels+1 {
		t.Errorf("%d model states kept", n)
	}
	if v := l.admit(&pl, "busy", 0); v.ok || v.by != "model:concurrency" {
		t.Errorf("busy model forgotten: ok %v by %q", v.ok, v.by)
	}
	if ms := l.models["charged"]; ms == nil || ms.req.size != 1 {
		t.Errorf("charged model forgotten: %+v", ms)
	}
	busy.lease.release()
}

// TestAdmitAllocs: in steady state admitting and releasing allocates
// nothing (the rings are reused).
func TestAdmitAllocs(t *testing.T) {
	c := newFakeClock()
	l := newLimiter()
	l.clock = c.now
	pl := ProviderLimits{Window: time.Second, Requests: 1000, Tokens: 1 << 30, Concurrency: 4, Models: map[string]ModelLimits{"m": {Requests: 1000, Tokens: 1 << 30}}}.normalized()
	step := func() {
		c.advance(5 * time.Millisecond)
		v := l.admit(&pl, "m", 7)
		if !v.ok {
			t.Fatalf("refused: %s", v.by)
		}
		l.rateHeaders(&pl, "m", v.ms)
		v.lease.release()
	}
	for range 1000 { // fill the window: the rings reach their size
		step()
	}
	if n := testing.AllocsPerRun(1000, step); n != 0 {
		t.Errorf("%v allocations per request", n)
	}
}
