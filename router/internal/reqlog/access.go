package reqlog

import (
	"bufio"
	"context"
	"log/slog"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/router/internal/hopsign"
	"github.com/ringgate/ringgate/router/internal/reply"
)

// Access is one request's access line, filled in as the request goes:
// made by Begin, its call's tenant and tokens noted by Call and Settled,
// written by Done, or by SetStream when a stream ends.
type Access struct {
	start              int64
	tenant, model      string
	estimated, charged int64
	// What the answer said: as it was written, or as its stream started.
	id, owner, code string
	status          int
	queued          int64
	hop             bool
}

type accessKey struct{}

// maxField bounds a text a client chose (the model) on an access line.
const maxField = 128

// Begin names the request (SetID) and, with access lines on, starts its
// access line.
func (n *Node) Begin(ctx *fasthttp.RequestCtx) {
	n.SetID(&ctx.Request.Header, &ctx.Response.Header)
	if n.access.Load() {
		ctx.SetUserValue(accessKey{}, &Access{start: n.clock()})
	}
}

// Of is ctx's access line; nil when access lines are off.
func Of(ctx *fasthttp.RequestCtx) *Access {
	a, _ := ctx.UserValue(accessKey{}).(*Access)
	return a
}

// Call notes the tenant and model of ctx's request on its access line,
// and returns the line (nil when off) for Settled.
func Call(ctx *fasthttp.RequestCtx, tenant, model string) *Access {
	a := Of(ctx)
	if a != nil {
		a.tenant, a.model = tenant, model[:min(len(model), maxField)]
	}
	return a
}

// Settled notes a call's tokens: estimated before, charged after.
func (a *Access) Settled(estimated, charged int64) {
	if a != nil {
		a.estimated, a.charged = estimated, charged
	}
}

// Done writes ctx's access line, for an answer written whole; a stream's
// (streaming) is SetStream's.
func (n *Node) Done(ctx *fasthttp.RequestCtx, streaming bool) {
	if a := Of(ctx); a != nil && !streaming {
		n.answered(ctx, a)
		n.write(a)
	}
}

// SetStream makes fn's writes the answer's body (reply.SetStream) and,
// with access lines on, writes the access line when fn returns, with what
// the answer said as it started: fn runs beside the handler, which may
// still change the answer meanwhile.
func (n *Node) SetStream(ctx *fasthttp.RequestCtx, fn func(w *bufio.Writer)) {
	a := Of(ctx)
	if a == nil {
		reply.SetStream(ctx, fn)
		return
	}
	n.answered(ctx, a)
	reply.SetStream(ctx, func(w *bufio.Writer) {
		fn(w)
		n.write(a)
	})
}

// answered keeps on a what ctx's answer says.
func (n *Node) answered(ctx *fasthttp.RequestCtx, a *Access) {
	h := &ctx.Response.Header
	a.id, a.owner, a.code = string(ID(h)), string(h.PeekBytes(hNode)), errorCode(&ctx.Response)
	a.status = ctx.Response.StatusCode()
	a.queued = queuedMs(h)
	a.hop = len(ctx.Request.Header.Peek(hopsign.HopHeader)) > 0 || a.owner != string(n.Name)
}

// write writes a's line.
func (n *Node) write(a *Access) {
	n.log.LogAttrs(context.Background(), slog.LevelInfo, "access",
		slog.String("request_id", a.id), slog.String("tenant", a.tenant), slog.String("model", a.model),
		slog.Int("status", a.status), slog.String("code", a.code), slog.String("owner", a.owner),
		slog.Bool("hop", a.hop), slog.Int64("queued_ms", a.queued),
		slog.Int64("duration_ms", (n.clock()-a.start)/1e6),
		slog.Int64("tokens_estimated", a.estimated), slog.Int64("tokens_charged", a.charged))
}

var hNode = []byte("X-Ringgate-Node")
