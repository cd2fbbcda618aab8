package router

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/limiter"
)

// Any hop header and signature a peer (or anyone reaching the port) can
// send is refused or accepted without a panic; only the one signed with
// the secret for this node, on this body and key, is accepted, once.
func FuzzHopVerify(f *testing.F) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_764_000_000, 0)
	s := newSigner(secret, 5*time.Second, func() time.Time { return now })
	signed := hopRequest(`{"model":"m"}`)
	s.sign(signed, "a", "b", 7, 2)
	f.Add(string(signed.Header.Peek(hopHeader)), string(signed.Header.Peek(sigHeader)), `{"model":"m"}`, "Bearer sk-a")
	f.Add("a,b,1,1764000000000,000000000000000000000000", "00", "", "")
	f.Add("a,b,18446744073709551615,-9223372036854775808,xxxxxxxxxxxxxxxxxxxxxxxx,3", "", "{}", "Bearer x")
	f.Add(",,,,,", "", "", "")
	f.Fuzz(func(t *testing.T, hop, sig, body, auth string) {
		v := newSigner(secret, 5*time.Second, func() time.Time { return now })
		req := &fasthttp.Request{}
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURI("/v1/chat/completions")
		req.Header.Set("Authorization", auth)
		req.SetBodyString(body)
		req.Header.Set(hopHeader, hop)
		req.Header.Set(sigHeader, sig)
		info, err := v.verify(req, "b")
		if err != nil {
			return
		}
		// Accepted: it must carry the secret's signature over this very
		// request, and be taken once only.
		if sig != v.mac(req, hop) || info.to != "b" || info.hops < 1 || info.hops > maxHops {
			t.Fatalf("accepted %q sig %q: %+v", hop, sig, info)
		}
		if _, err := v.verify(req, "b"); err == nil {
			t.Fatalf("the same hop accepted twice: %q", hop)
		}
	})
}

// Whatever a peer's delta report says (it is signed, but a bug or a
// version skew can send anything), decoding it and applying its deltas to
// a tenant's limiter does not panic, and the limiter goes on deciding
// within its limits: no window counts below zero, no admission past them.
func FuzzApplyDeltas(f *testing.F) {
	f.Add([]byte(`{"tenant":"acme","from":"n2","deltas":[{"Bucket":29400000,"SlotBucket":490000,"Requests":1,"Tokens":10,"Slots":1}]}`))
	f.Add([]byte(`{"tenant":"acme","deltas":[{"Bucket":-1,"SlotBucket":9223372036854775807,"Requests":-5,"Tokens":-9223372036854775808,"Slots":-3}]}`))
	f.Add([]byte(`{"deltas":[{"Bucket":29400000,"Tokens":9223372036854775807},{"Bucket":29400000,"Tokens":9223372036854775807}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m deltaMsg
		if json.Unmarshal(b, &m) != nil || len(m.Deltas) > 64 {
			return
		}
		const window = time.Minute
		lim := limiter.NewTenant(limiter.Limits{Requests: 10, Tokens: 1000, Concurrency: 2}, window, window)
		now := time.Unix(1_764_000_000, 0).UnixNano()
		for _, d := range m.Deltas {
			lim.ApplyFrom(now, m.From, d)
		}
		u := lim.Usage(now)
		if u.Requests < 0 || u.InFlight < 0 {
			t.Fatalf("usage %+v after %s", u, b)
		}
		before := u
		_, d := lim.Admit(now, 1)
		if d.Allowed && (before.Requests >= 10 || before.InFlight >= 2 || before.Tokens+1 > 1000) {
			t.Fatalf("admitted past the limits: usage %+v after %s", before, b)
		}
		lim.Usage(now + int64(2*window)) // the window rolls past it all
	})
}
