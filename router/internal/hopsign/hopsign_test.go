package hopsign

import (
	"errors"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func hopRequest(body string) *fasthttp.Request {
	req := &fasthttp.Request{}
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("/v1/chat/completions")
	req.Header.Set("Authorization", "Bearer sk-a")
	req.SetBodyString(body)
	return req
}

func TestHopVerify(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_764_000_000, 0)
	clock := func() time.Time { return now }
	cases := []struct {
		name    string
		tamper  func(req *fasthttp.Request)
		signer  *Signer
		self    string
		advance time.Duration
		want    error
	}{
		{name: "valid", self: "b"},
		{name: "other secret", signer: New([]byte("ffffffffffffffffffffffffffffffff"), time.Second, clock), self: "b", want: ErrSignature},
		{name: "body changed", tamper: func(r *fasthttp.Request) { r.SetBodyString(`{"x":2}`) }, self: "b", want: ErrSignature},
		{name: "tenant key changed", tamper: func(r *fasthttp.Request) { r.Header.Set("Authorization", "Bearer sk-b") }, self: "b", want: ErrSignature},
		{name: "path changed", tamper: func(r *fasthttp.Request) { r.SetRequestURI("/v1/embeddings") }, self: "b", want: ErrSignature},
		{name: "signature missing", tamper: func(r *fasthttp.Request) { r.Header.Del(SigHeader) }, self: "b", want: ErrSignature},
		{name: "header garbage", tamper: func(r *fasthttp.Request) { r.Header.Set(HopHeader, "a,b,c") }, self: "b", want: ErrMalformed},
		{name: "addressed to another node", self: "c", want: ErrTarget},
		{name: "stale", self: "b", advance: 6 * time.Second, want: ErrStale},
		{name: "from the future", self: "b", advance: -6 * time.Second, want: ErrStale},
		{name: "no secret here", signer: New(nil, time.Second, clock), self: "b", want: ErrUnsigned},
		// What the owner acts on besides the key is signed too (v1 did
		// not: an on-path attacker could change the organization billed
		// or the queue class).
		{name: "query added", tamper: func(r *fasthttp.Request) { r.SetRequestURI("/v1/chat/completions?x=1") }, self: "b", want: ErrSignature},
		{name: "organization changed", tamper: func(r *fasthttp.Request) { r.Header.Set("OpenAI-Organization", "org-other") }, self: "b", want: ErrSignature},
		{name: "project added", tamper: func(r *fasthttp.Request) { r.Header.Set("OpenAI-Project", "proj-other") }, self: "b", want: ErrSignature},
		{name: "anthropic-beta added", tamper: func(r *fasthttp.Request) { r.Header.Set("anthropic-beta", "x") }, self: "b", want: ErrSignature},
		{name: "priority changed", tamper: func(r *fasthttp.Request) { r.Header.Set(PriorityHeader, "batch") }, self: "b", want: ErrSignature},
		{name: "key moved to the other key header", tamper: func(r *fasthttp.Request) {
			r.Header.Del("Authorization")
			r.Header.Set("x-api-key", "Bearer sk-a")
		}, self: "b", want: ErrSignature},
		// A node restarted under its name has forgotten the nonces it saw:
		// a hop signed before it started is refused (a replay), one signed
		// by a peer whose clock is a little behind is not.
		{name: "signed before a restart", signer: New(secret, 5*time.Second, func() time.Time { return now.Add(time.Second) }), self: "b", advance: time.Second, want: ErrBeforeStart},
		{name: "peer clock 100ms behind, just after a restart", signer: New(secret, 5*time.Second, func() time.Time { return now.Add(100 * time.Millisecond) }), self: "b", advance: 100 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := New(secret, 5*time.Second, clock)
			req := hopRequest(`{"x":1}`)
			req.Header.Set("OpenAI-Organization", "org-client")
			s.Sign(req, "a", "b", 7)
			if tc.tamper != nil {
				tc.tamper(req)
			}
			v := s
			if tc.signer != nil {
				v = tc.signer
			}
			later := now.Add(tc.advance)
			v.now = func() time.Time { return later }
			info, err := v.Verify(req, tc.self)
			if !errors.Is(err, tc.want) {
				t.Fatalf("verify: %v, want %v", err, tc.want)
			}
			if err == nil && (info.From != "a" || info.To != "b" || info.RingVersion != 7) {
				t.Fatalf("parsed %+v", info)
			}
		})
	}
}

func TestHopReplayRefused(t *testing.T) {
	s := New([]byte("0123456789abcdef0123456789abcdef"), 5*time.Second, time.Now)
	req := hopRequest(`{"x":1}`)
	s.Sign(req, "a", "b", 1)
	if _, err := s.Verify(req, "b"); err != nil {
		t.Fatalf("first delivery: %v", err)
	}
	if _, err := s.Verify(req, "b"); !errors.Is(err, ErrReplay) {
		t.Fatalf("replay: %v, want %v", err, ErrReplay)
	}
}
