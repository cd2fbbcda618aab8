package floor

import (
	"bytes"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/fakeupstream"
)

// TestFloorRelays: the floor passes a JSON answer and a whole SSE stream
// through unchanged in substance.
func TestFloorRelays(t *testing.T) {
	fake := fakeupstream.New(fakeupstream.Options{CompletionMin: 5, CompletionMax: 5})
	up, err := fake.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	p, err := Start("127.0.0.1:0", up)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	hc := &fasthttp.HostClient{Addr: p.Addr(), ReadTimeout: 5 * time.Second}
	for _, tc := range []struct {
		body, want string
	}{
		{`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`, `"chat.completion"`},
		{`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`, "data: [DONE]"},
	} {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + p.Addr() + "/v1/chat/completions")
		req.Header.SetMethod(fasthttp.MethodPost)
		req.Header.SetContentType("application/json")
		req.Header.Set("Authorization", "Bearer sk-x")
		req.SetBodyString(tc.body)
		if err := hc.Do(req, resp); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode() != 200 || !bytes.Contains(resp.Body(), []byte(tc.want)) {
			t.Errorf("%s: status %d, body %.200q", tc.body, resp.StatusCode(), resp.Body())
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
}
