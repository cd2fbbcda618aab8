package router

import (
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/internal/benchsetup"
	"github.com/ringgate/ringgate/reserve"
)

// BenchmarkHandlerRefused is what the handler costs a request its tenant's
// limits refuse at once (rpm 1, no queue): the path a flood takes, its
// refused line included (to a JSON logger writing nowhere).
//
//	go test -run XXX -bench HandlerRefused -benchtime 20000x -count 5 ./router/
func BenchmarkHandlerRefused(b *testing.B) {
	tok, err := reserve.NewTokenizer()
	if err != nil {
		b.Fatal(err)
	}
	_, addr := benchsetup.Fake(b)
	cfg := benchsetup.Config("bench", addr)
	cfg.Tenants[0].RPM = 1
	cfg.Queue.InteractiveWait, cfg.Queue.BatchWait = 0, 0
	r, err := New(Options{Config: cfg, Tokenizer: tok, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ln.Close() })
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	peer, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = peer.Close() })

	var req fasthttp.Request
	req.SetRequestURI("http://" + addr + "/v1/chat/completions")
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("Authorization", "Bearer "+benchsetup.Key)
	req.SetBodyString(benchsetup.Body)
	var ctx fasthttp.RequestCtx
	serve := func() int {
		ctx.Init2(peer, nil, false)
		req.CopyTo(&ctx.Request)
		ctx.Response.Reset()
		r.Handler(&ctx)
		return ctx.Response.StatusCode()
	}
	serve() // the one request rpm 1 admits
	for range 200 {
		if s := serve(); s != fasthttp.StatusTooManyRequests {
			b.Fatalf("status %d, want 429: %.300s", s, ctx.Response.Body())
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if s := serve(); s != fasthttp.StatusTooManyRequests {
			b.Fatalf("status %d, want 429", s)
		}
	}
}
