package router

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/internal/benchsetup"
	"github.com/ringgate/ringgate/internal/procstat"
	"github.com/ringgate/ringgate/reserve"
)

// BenchmarkHandler is what one node's handler costs a JSON request, without
// the client's side of the network or its wake-ups: the request is handed
// to Handler as fasthttp's server would, one at a time, on a loopback
// connection (so that the hang-up watch lists it), and the provider is the
// project's fake on loopback. Its floor is bench/floor's handler
// (the same request sent as it is to the same fake, the answer relayed), in
// the same run; ringgate − floor is the CPU ringgate's own work takes.
// cpu-µs/op is the whole process's CPU a request, the fake's included (the
// same for both).
//
//	go test -run XXX -bench Handler -benchtime 20000x -count 6 ./router/
func BenchmarkHandler(b *testing.B) {
	tok, err := reserve.NewTokenizer()
	if err != nil {
		b.Fatal(err)
	}
	_, addr := benchsetup.Fake(b)
	cfg := benchsetup.Config("bench", addr)
	r, err := New(Options{Config: cfg, Tokenizer: tok, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.Close)

	// A client connection for the requests to come in on: its peer is
	// never written to, as a client waiting for its answer.
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

	// The floor's handler, as bench/floor serves a JSON request.
	floor := &fasthttp.HostClient{Addr: addr, MaxConns: 16, NoDefaultUserAgentHeader: true, DisablePathNormalizing: true}
	b.Cleanup(floor.CloseIdleConnections)
	var floorErr error
	for _, h := range []struct {
		name  string
		serve fasthttp.RequestHandler
	}{
		{"floor", func(ctx *fasthttp.RequestCtx) { floorErr = floor.Do(&ctx.Request, &ctx.Response) }},
		{"ringgate", r.Handler},
	} {
		b.Run(h.name, func(b *testing.B) {
			var req fasthttp.Request
			req.SetRequestURI("http://" + addr + "/v1/chat/completions")
			req.Header.SetMethod(fasthttp.MethodPost)
			req.Header.SetContentType("application/json")
			req.Header.Set("Authorization", "Bearer "+benchsetup.Key)
			req.SetBodyString(benchsetup.Body)
			var ctx fasthttp.RequestCtx
			serve := func() {
				// As the server hands each request over: on its
				// connection, the answer empty.
				ctx.Init2(peer, nil, false)
				req.CopyTo(&ctx.Request)
				ctx.Response.Reset()
				h.serve(&ctx)
				if floorErr != nil {
					b.Fatal(floorErr)
				}
				if ctx.Response.StatusCode() != fasthttp.StatusOK || !bytes.Contains(ctx.Response.Body(), []byte(`"chat.completion"`)) {
					b.Fatalf("%s: status %d: %.300s", h.name, ctx.Response.StatusCode(), ctx.Response.Body())
				}
			}
			for range 200 { // connections open, the tokenizer loaded
				serve()
			}
			cpu0 := procstat.CPU()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				serve()
			}
			b.StopTimer()
			b.ReportMetric(float64(procstat.CPU()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
		})
	}
}
