package hop

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/router/internal/hopsign"
)

// A peer call signed by its caller is taken by CheckPost on the peer, with
// its sender; an unsigned one, or a GET, is refused there in OpenAI's
// error shape, and only the bad signature counts as a refused hop.
func TestPeerCallChecked(t *testing.T) {
	net := NewInmem()
	signer := hopsign.New([]byte("0123456789abcdef0123456789abcdef"), 5*time.Second, time.Now)
	refused := new(count)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		info, ok := CheckPost(ctx, signer, "b", refused)
		if ok {
			ctx.SetBodyString(info.From + ":" + string(ctx.PostBody()))
		}
	}}
	ln := net.Listen("b")
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	p := New(Config{Connect: time.Second, First: time.Second, Idle: time.Second, Dial: net.Dialer("a")})

	sign := func(req *fasthttp.Request) { signer.Sign(req, "a", "b", 1, 1) }
	status, body, err := p.Post("b", "b", "/peer", map[string]int{"n": 1}, sign, time.Second)
	if err != nil || status != http.StatusOK || string(body) != `a:{"n":1}` {
		t.Fatalf("signed POST: %d %q %v", status, body, err)
	}
	status, body, err = p.Do("b", "b", fasthttp.MethodPost, "/peer", []byte("{}"), func(*fasthttp.Request) {}, time.Second)
	if err != nil || status != http.StatusUnauthorized || code(body) != "invalid_peer_signature" {
		t.Fatalf("unsigned POST: %d %q %v", status, body, err)
	}
	status, body, err = p.Do("b", "b", fasthttp.MethodGet, "/peer", nil, sign, time.Second)
	if err != nil || status != http.StatusMethodNotAllowed || code(body) != "method_not_allowed" {
		t.Fatalf("GET: %d %q %v", status, body, err)
	}
	if n := refused.Load(); n != 1 {
		t.Fatalf("refused hops counted: %v, want 1", n)
	}
}

// count counts the refused hops.
type count struct{ atomic.Int64 }

func (c *count) Inc() { c.Add(1) }

func code(body []byte) string {
	var v struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(body, &v)
	return v.Error.Code
}
