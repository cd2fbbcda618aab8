package router

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/router/internal/cluster"
	"github.com/ringgate/ringgate/router/internal/hop"
	"github.com/ringgate/ringgate/router/internal/hopsign"
	"github.com/ringgate/ringgate/router/internal/levels"
	"github.com/ringgate/ringgate/router/internal/metrics"
	"github.com/ringgate/ringgate/router/internal/reply"
	"github.com/ringgate/ringgate/router/internal/reqlog"
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
	reply.CopyHopHeaders(req, &ctx.Request.Header, hopsign.SignedHeaderNames)
	reqlog.CopyID(&req.Header, &ctx.Response.Header)
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
		reply.Fail(ctx, fasthttp.StatusBadGateway, "server_error", "owner_failed",
			fmt.Sprintf("The node enforcing this tenant's limits (%s) failed mid-request; retry.", owner))
		return true, false
	}
	if reason := hopsign.Refusal(resp); reason != "" {
		// The owner refused the hop (stale, not ready, ...): it took
		// nothing, and its refusal is not the client's (wake.go).
		r.metrics.HopEnded(metrics.HopRefused, took)
		fasthttp.ReleaseResponse(resp)
		r.ownerRefused(ctx, t, owner, reason)
		return true, false
	}
	r.fb.NoteUsage(t, &resp.Header)
	r.fb.End(t, owner)
	reply.CopyPeerHeaders(&ctx.Response.Header, &resp.Header, edgeOnly)
	ctx.SetStatusCode(resp.StatusCode())
	if bytes.HasPrefix(resp.Header.ContentType(), []byte("text/event-stream")) {
		r.metrics.HopEnded(metrics.HopAnswered, took)
		wd := reply.WriteDeadline(ctx, r.clientWriteIdle)
		r.tell.SetStream(ctx, func(w *bufio.Writer) {
			defer r.done()
			defer wd.Done()
			defer fasthttp.ReleaseResponse(resp)
			reply.Relay(w, resp.BodyStream(), wd)
		})
		return true, true
	}
	ctx.Response.ResetBody()
	err = reply.ReadAnswer(&ctx.Response, resp)
	fasthttp.ReleaseResponse(resp)
	if err == nil {
		r.metrics.HopEnded(metrics.HopAnswered, took)
	} else {
		r.metrics.HopEnded(metrics.HopFailed, took)
		ctx.Response.ResetBody()
		reqlog.ResetKeepID(&ctx.Response.Header)
		r.tell.SetNode(&ctx.Response.Header)
		reply.Fail(ctx, fasthttp.StatusBadGateway, "server_error", "owner_failed",
			fmt.Sprintf("The node enforcing this tenant's limits (%s) failed mid-answer; retry.", owner))
	}
	return true, false
}

// edgeOnly are the headers of an owner's answer for the edge alone, which
// its client does not get.
var edgeOnly = [][]byte{
	[]byte(levels.UsedHeader), // between nodes only (package levels)
}
