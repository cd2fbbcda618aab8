package router

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/away"
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
	r.noteOwnerUsage(t, &resp.Header)
	r.endFallback(t, owner)
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

// fallbackLimiter returns the tenant's strict local limiter, set to its share
// of each limit (limit / live members, rounded down), and whether anything
// fits at all: a limit smaller than the member count leaves this node a share
// of zero, and admitting even one would risk the promise.
func (r *Router) fallbackLimiter(t *tenant.Tenant, v *cluster.Lookup, owner string) (*limiter.Tenant, bool) {
	n := int64(1)
	if v != nil {
		n = int64(v.LiveMembers())
	}
	l, open := away.ShareOf(t.Limits, n)
	fl := t.Core().Fb.Share()
	if open {
		// The owner keeps to what this share leaves it (away.Unreachables);
		// a closed share admits nothing and leaves it all.
		r.noteFallback(t, owner)
		// Never store a -1 share: the limiter reads <= 0 as "no limit".
		fl.SetLimits(l)
	}
	if !t.Falling() {
		// The first request of an episode seeds the share with the owner's
		// recent usage; the others wait for it rather than admit blind.
		t.Core().FallbackMu.Lock()
		if !t.Falling() {
			seeded := r.seedFallback(t, n, owner)
			c := t.Core()
			again := c.Fb.SetOwner(owner)
			// An owner that answers now and then restarts the episode
			// at each failure: its restarts are logged once a second.
			log, muted := true, int64(0)
			if again {
				log, muted = c.FbStartLog.Allow(r.clock(), fallbackLogEvery)
			} else {
				c.FbStartLog.Last.Store(r.clock())
				c.FbStartLog.Mute.Store(0)
			}
			c.FbLogged.Store(log) // read by the episode's end (endFallback)
			t.Core().InFallback.Store(true)
			r.metrics.FallbackEpisodes.Inc()
			if log {
				r.log.Warn("fallback", "phase", "start", "tenant", t.Name, "owner", owner, "members", n,
					"share_rpm", l.Requests, "share_tpm", l.Tokens, "share_concurrency", l.Concurrency, "seeded", seeded,
					"restarts_not_logged", muted)
			}
		}
		t.Core().FallbackMu.Unlock()
	}
	return fl, open
}

// seedFallback charges the tenant's fallback share with its share (1/n) of
// what the unreachable owner had admitted: its last snapshot and the time
// since at the peak rate, or else what its last answers relayed here
// reported (seedFromAnswers). Each of the n-1 other nodes doing the same
// keeps their admissions plus the owner's within the limit, instead of
// adding n-1 fresh shares to whatever the owner had admitted before it
// went silent. It says which account it used.
//
// A node that abandoned a spill within the window (spillover.Loop.Abandon) uses
// neither: other nodes may have gone on admitting on the spill's budget,
// which does not count this node's share, and no snapshot holds what they
// admit. Its share starts spent.
//
// The seed is made on a scratch share and then swapped into the real one
// for the seed of the episode before if that was about the same owner
// (limiter.Replace): an owner that answers now and then restarts the
// episode at each failure, and the seeds of the restarts describe the same
// usage, which piled up would spend the share for a window.
func (r *Router) seedFallback(t *tenant.Tenant, n int64, owner string) string {
	c := t.Core()
	now := r.clock()
	fl := c.Fb.Share()
	scratch := limiter.NewTenant(fl.Limits(), fl.Window(), c.Fb.SlotTTL())
	how := ""
	abandoned := c.Spill.AbandonedAt.Load() > now-int64(c.Lim.Window())
	if seed := r.moving.fallbackSeed.Load(); seed != nil && !abandoned {
		if st, ok := (*seed)(t.Name); ok {
			// The gap is charged again up to now even when the snapshot
			// is the one the last episode used: an owner that answered
			// in between admitted on the connections that reached it,
			// and no newer snapshot says what (it may be unable to write
			// one, or be closing).
			share := st.Share(n)
			scratch.Replace(now, limiter.State{}, share)
			scratch.ChargeGap(now, share)
			how = "redis_snapshot"
		}
	}
	if how == "" {
		how = r.seedFromAnswers(scratch, t, n, abandoned)
	}
	seed := scratch.Export(now)
	last := c.Fb.SwapSeed(owner, seed)
	fl.Replace(now, last, seed)
	return how
}

// fallbackLogEvery bounds the start lines of a tenant's fallback episodes
// that restart for the same owner.
const fallbackLogEvery = time.Second

// SetFallbackSeed gives the router a source of a tenant's last known state
// (the node's snapshot store) for seeding fallback shares.
func (r *Router) SetFallbackSeed(seed func(tenant string) (limiter.State, bool)) {
	r.moving.fallbackSeed.Store(&seed)
}

// endFallback logs the end of a tenant's fallback episode, once, and
// ends its levels' (package levels): the owner that answers for the tenant owns
// them too, and a level's episode left open would not be seeded afresh
// when the owner next goes silent.
func (r *Router) endFallback(t *tenant.Tenant, owner string) {
	if t.Falling() && t.Core().InFallback.CompareAndSwap(true, false) {
		if t.Core().FbLogged.Load() {
			r.log.Info("fallback", "phase", "end", "tenant", t.Name, "owner", owner)
		}
		t.Core().FbQueue.Kick() // those waiting on the share go to the owner
		r.reportFallback(t)
	}
	if t.Team != nil {
		r.endFallback(t.Team, owner)
	}
	for _, e := range t.Models {
		r.endFallback(e, owner)
	}
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
