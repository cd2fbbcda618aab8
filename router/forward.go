package router

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/router/internal/cluster"
	"github.com/ringgate/ringgate/router/internal/hop"
	"github.com/ringgate/ringgate/router/internal/hopsign"
	"github.com/ringgate/ringgate/router/internal/levels"
	"github.com/ringgate/ringgate/router/internal/metrics"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// toOwner hands the client's request to the tenant's owner and relays the
// answer. handled is false when the owner could not be reached before any of
// the request left this node; the caller then enforces the strict local share.
// streaming is true when a relayed stream finishes later (and calls done).
func (r *Router) toOwner(ctx *fasthttp.RequestCtx, v *cluster.Lookup, owner string, t *tenant.Tenant, hops int) (handled, streaming bool) {
	addr := v.Addrs()[owner]
	if addr == "" || !r.hops.Enabled() {
		return false, false
	}
	if r.peers.Down(addr) {
		r.metrics.HopEnded(metrics.HopUnreachable, 0) // marked down a moment ago: not tried
		return false, false
	}
	req := fasthttp.AcquireRequest()
	copyHopHeaders(req, &ctx.Request.Header)
	req.Header.SetHost(addr)
	req.SetBodyRaw(ctx.PostBody())
	r.hops.Sign(req, r.node, owner, v.Version(), hops)
	resp := fasthttp.AcquireResponse()
	w := r.watchHop(ctx, v, owner, string(req.Header.Peek(hopHeader)))
	sent := time.Now()
	err := r.peers.Hop(addr, req, resp)
	took := time.Since(sent)
	fasthttp.ReleaseRequest(req)
	if w.Stop() {
		// The client hung up while the owner waited for the upstream:
		// the owner was told and ended the call; nothing to relay.
		if err != nil {
			r.metrics.HopEnded(metrics.HopFailed, took)
		} else {
			r.metrics.HopEnded(metrics.HopAnswered, took)
		}
		r.hopGone(ctx, w, owner, resp)
		return true, false
	}
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		if errors.Is(err, hop.ErrUnreachable) {
			// The owner never saw it: decided here.
			r.metrics.HopEnded(metrics.HopUnreachable, took)
			return false, false
		}
		// The owner took the request and then failed: it may have admitted
		// it, so it is not retried here.
		r.metrics.HopEnded(metrics.HopFailed, took)
		r.log.Warn("forward", "tenant", t.Name, "owner", owner, "error", err.Error())
		fail(ctx, fasthttp.StatusBadGateway, "server_error", "owner_failed",
			fmt.Sprintf("The node enforcing this tenant's limits (%s) failed mid-request; retry.", owner))
		return true, false
	}
	if reason := hopRefusal(resp); reason != "" {
		// The owner refused the hop (stale, not ready, ...): it took
		// nothing, and its refusal is not the client's (wake.go).
		r.metrics.HopEnded(metrics.HopRefused, took)
		fasthttp.ReleaseResponse(resp)
		r.ownerRefused(ctx, t, owner, reason)
		return true, false
	}
	r.fb.NoteUsage(t, &resp.Header)
	r.fb.End(t, owner)
	for k, val := range resp.Header.All() {
		if !isConnHeader(k) {
			ctx.Response.Header.SetBytesKV(k, val)
		}
	}
	ctx.SetStatusCode(resp.StatusCode())
	if bytes.HasPrefix(resp.Header.ContentType(), []byte("text/event-stream")) {
		r.metrics.HopEnded(metrics.HopAnswered, took)
		wd := r.writeDeadline(ctx)
		setStream(ctx, func(w *bufio.Writer) {
			defer r.done()
			defer wd.done()
			defer fasthttp.ReleaseResponse(resp)
			relay(w, resp.BodyStream(), wd)
		})
		return true, true
	}
	ctx.Response.ResetBody()
	err = readAnswer(&ctx.Response, resp)
	fasthttp.ReleaseResponse(resp)
	if err == nil {
		r.metrics.HopEnded(metrics.HopAnswered, took)
	} else {
		r.metrics.HopEnded(metrics.HopFailed, took)
		ctx.Response.ResetBody()
		ctx.Response.Header.Reset()
		r.setNodeHeader(&ctx.Response.Header)
		fail(ctx, fasthttp.StatusBadGateway, "server_error", "owner_failed",
			fmt.Sprintf("The node enforcing this tenant's limits (%s) failed mid-answer; retry.", owner))
	}
	return true, false
}

// relay copies an owner's stream to the client as it arrives, flushing each
// read; a write error (the client hung up) stops it, and releasing the
// response closes the owner connection so the owner sees the hang-up too.
func relay(w *bufio.Writer, src io.Reader, wd streamDeadline) {
	if src == nil {
		return
	}
	bp := streamBufs.Get().(*[]byte)
	defer streamBufs.Put(bp)
	for {
		n, err := src.Read(*bp)
		if n > 0 {
			wd.extend()
			if _, werr := w.Write((*bp)[:n]); werr != nil {
				return
			}
			if werr := w.Flush(); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// isConnHeader reports headers about one connection, which a relay must not
// copy (fasthttp sets its own framing).
func isConnHeader(k []byte) bool {
	for _, h := range connHeaders {
		if bytes.EqualFold(k, h) {
			return true
		}
	}
	return false
}

var connHeaders = [][]byte{
	[]byte("Connection"), []byte("Keep-Alive"), []byte("Transfer-Encoding"), []byte("Content-Length"),
	[]byte("Te"), []byte("Trailer"), []byte("Upgrade"), []byte("Date"), []byte("Server"),
	[]byte(levels.UsedHeader), // between nodes only (package levels)
}

// copyHopHeaders sets on req what a hop carries of the client's request
// besides its body: method, path and query, content type, and the headers
// the owner acts on (hopsign.SignedHeaders: the key, the queue class, those
// it sends on to the provider). Nothing else: the owner reads nothing else,
// and the hop's own headers must fit the owner's header buffer whatever
// the client sent (a 3.7 KiB cookie once made a request that its owner
// served when sent straight there fail when handed to it).
func copyHopHeaders(req *fasthttp.Request, client *fasthttp.RequestHeader) {
	req.Header.SetMethodBytes(client.Method())
	req.Header.SetRequestURIBytes(client.RequestURI())
	if ct := client.ContentType(); len(ct) > 0 {
		req.Header.SetContentTypeBytes(ct)
	}
	var buf [16][]byte // on the stack: a hop is a request's path
	vals := buf[:len(hopsign.SignedHeaderNames)]
	firstHeaders(client, hopsign.SignedHeaderNames, vals)
	for i, name := range hopsign.SignedHeaderNames {
		if len(vals[i]) > 0 {
			req.Header.SetCanonical(name, vals[i])
		}
	}
}
