// Package floor is the benchmark floor: a bare fasthttp reverse proxy that
// forwards every request to one upstream and relays the answer, with no
// authentication, parsing or limits. An SSE answer is relayed read by read,
// each flushed, as an LLM proxy must (a client sees each token as it comes);
// any other answer is read whole and sent on. Whatever ringgate adds over
// going direct to a provider is measured against what this adds: the cost of
// one more HTTP server and client on the path, which no gateway can avoid.
//
// It knows nothing of ringgate; it exists only for benchmarks.
package floor

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// Proxy is a running floor proxy.
type Proxy struct {
	ln  net.Listener
	srv *fasthttp.Server
	hc  *fasthttp.HostClient // JSON answers, read whole
	shc *fasthttp.HostClient // streams, relayed as they come
}

// Start listens on listen (host:port; port 0 for a free one) and forwards
// every request to upstream (host:port, plain HTTP, keep-alive).
func Start(listen, upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("floor proxy listen %s: %w", listen, err)
	}
	pool := func(stream bool) *fasthttp.HostClient {
		return &fasthttp.HostClient{
			Addr:                upstream,
			MaxConns:            1024,
			ReadTimeout:         30 * time.Second,
			WriteTimeout:        30 * time.Second,
			MaxIdleConnDuration: time.Minute,
			// As ringgate's provider pools, so that neither is measured
			// with the other's handicap: after a burst, taking the
			// connections in turn (fasthttp's default) keeps every one
			// in use, each cold in the cache (8 clients after 64: the
			// floor 5 % slower).
			ConnPoolStrategy:         fasthttp.LIFO,
			NoDefaultUserAgentHeader: true,
			DisablePathNormalizing:   true,
			StreamResponseBody:       stream,
		}
	}
	p := &Proxy{ln: ln, hc: pool(false), shc: pool(true)}
	p.srv = &fasthttp.Server{
		Handler:               p.serve,
		ReadTimeout:           30 * time.Second,
		WriteTimeout:          30 * time.Second,
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
	}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// serve forwards the request as it came and copies the answer back. A
// request that asks for a stream (its body says "stream":true; the floor
// looks no further into it) is answered through the streaming pool.
func (p *Proxy) serve(ctx *fasthttp.RequestCtx) {
	if !bytes.Contains(ctx.PostBody(), []byte(`"stream":true`)) {
		if err := p.hc.Do(&ctx.Request, &ctx.Response); err != nil {
			ctx.Response.Reset()
			ctx.Error("upstream: "+err.Error(), fasthttp.StatusBadGateway)
		}
		return
	}
	resp := fasthttp.AcquireResponse()
	if err := p.shc.Do(&ctx.Request, resp); err != nil {
		fasthttp.ReleaseResponse(resp)
		ctx.Error("upstream: "+err.Error(), fasthttp.StatusBadGateway)
		return
	}
	resp.Header.CopyTo(&ctx.Response.Header)
	ctx.Response.Header.Del("Content-Length")
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer fasthttp.ReleaseResponse(resp)
		src := resp.BodyStream()
		if src == nil {
			_, _ = w.Write(resp.Body())
			return
		}
		buf := make([]byte, 16<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil || w.Flush() != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops the proxy and its upstream connections.
func (p *Proxy) Close() error {
	err := p.srv.Shutdown()
	p.hc.CloseIdleConnections()
	return err
}
