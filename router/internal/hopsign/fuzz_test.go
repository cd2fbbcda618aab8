package hopsign

import (
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// Any hop header and signature a peer (or anyone reaching the port) can
// send is refused or accepted without a panic; only the one signed with
// the secret for this node, on this body and key, is accepted, once.
func FuzzHopVerify(f *testing.F) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_764_000_000, 0)
	s := New(secret, 5*time.Second, func() time.Time { return now })
	signed := hopRequest(`{"model":"m"}`)
	s.Sign(signed, "a", "b", 7, 2)
	f.Add(string(signed.Header.Peek(HopHeader)), string(signed.Header.Peek(SigHeader)), `{"model":"m"}`, "Bearer sk-a")
	f.Add("a,b,1,1764000000000,000000000000000000000000", "00", "", "")
	f.Add("a,b,18446744073709551615,-9223372036854775808,xxxxxxxxxxxxxxxxxxxxxxxx,3", "", "{}", "Bearer x")
	f.Add(",,,,,", "", "", "")
	f.Fuzz(func(t *testing.T, hop, sig, body, auth string) {
		v := New(secret, 5*time.Second, func() time.Time { return now })
		req := &fasthttp.Request{}
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURI("/v1/chat/completions")
		req.Header.Set("Authorization", auth)
		req.SetBodyString(body)
		req.Header.Set(HopHeader, hop)
		req.Header.Set(SigHeader, sig)
		info, err := v.Verify(req, "b")
		if err != nil {
			return
		}
		// Accepted: it must carry the secret's signature over this very
		// request, and be taken once only.
		if sig != v.mac(req, hop) || info.To != "b" || info.Hops < 1 || info.Hops > MaxHops {
			t.Fatalf("accepted %q sig %q: %+v", hop, sig, info)
		}
		if _, err := v.Verify(req, "b"); err == nil {
			t.Fatalf("the same hop accepted twice: %q", hop)
		}
	})
}
