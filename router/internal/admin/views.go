package admin

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/router/internal/reply"
	"github.com/ringgate/ringgate/router/internal/status"
)

// serveEntity answers /tenants/{name} or /teams/{name} (kind: "tenant",
// "team"), found by find: the owner's view, or this node's.
func serveEntity[V any](h *Handler, ctx *fasthttp.RequestCtx, kind, name string, local, fromPeer bool,
	find func(name string) (string, func(owner, ownerError string) V, bool)) {
	entity, view, ok := find(name)
	if !ok {
		reply.Fail(ctx, fasthttp.StatusNotFound, "invalid_request_error", "unknown_"+kind, "No "+kind+" named "+name+".")
		return
	}
	owner, ownerError, answered := h.ownerView(ctx, entity, name, local, fromPeer)
	if answered {
		return
	}
	reply.JSON(ctx, fasthttp.StatusOK, view(owner, ownerError))
}

// ownerView finds the owner of entity (a tenant or a team, named name to
// the client) by this node's ring and, unless the view asked for is this
// node's own (local), answers with the owner's view when another node owns
// it. answered: ctx holds the answer (the owner's view, or a peer's
// question refused because this node's ring names another owner: a ring
// change under way, its figures not the owner's). Otherwise the caller
// answers with this node's view, ownerError saying why the owner's could
// not be had ("" when this node owns it or local was asked).
func (h *Handler) ownerView(ctx *fasthttp.RequestCtx, entity, name string, local, fromPeer bool) (owner, ownerError string, answered bool) {
	if h.owns(entity) {
		return h.cfg.Node, "", false
	}
	owner = h.cfg.Peers.Owner(entity)
	if fromPeer {
		reply.Fail(ctx, fasthttp.StatusConflict, "invalid_request_error", "not_owner",
			"By this node's ring, "+owner+" owns "+name+".")
		return owner, "", true
	}
	if local {
		return owner, "", false
	}
	ownerError = h.fromOwner(ctx, owner)
	return owner, ownerError, ownerError == ""
}

// owns reports whether this node owns entity by its ring: it does
// alone, before a ring names an owner.
func (h *Handler) owns(entity string) bool {
	owner := h.cfg.Peers.Owner(entity)
	return owner == "" || owner == h.cfg.Node
}

// fromOwner answers a view of a tenant or team that owner, another node,
// owns with the owner's own view: this node's usage of it is at most its
// fallback share's. It returns "" when it answered, else why it could not
// (the owner unreachable, or not answering 200: it may not know the name
// yet in a rolling reload); the caller then answers with its own view.
func (h *Handler) fromOwner(ctx *fasthttp.RequestCtx, owner string) string {
	v := h.cfg.Peers.View()
	addr := v.Addrs[owner]
	if addr == "" || !v.Signed {
		return "no address for the owner, or no cluster secret to ask it with"
	}
	code, body, err := v.Ask(addr, owner, string(ctx.URI().RequestURI()), OwnerViewTimeout)
	switch {
	case err != nil:
		return err.Error()
	case code != fasthttp.StatusOK:
		return fmt.Sprintf("%s answered %d: %.200s", owner, code, body)
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
	return ""
}

// serveUpstreams answers GET /upstreams: this node's view, and unless
// local (an admin's ?local=1, or a member asking) every other member's.
func (h *Handler) serveUpstreams(ctx *fasthttp.RequestCtx, local bool) {
	out := h.cfg.Source.Upstreams()
	if !local {
		out.Peers = h.peerUpstreams()
	}
	reply.JSON(ctx, fasthttp.StatusOK, out)
}

// peerUpstreams asks every other member of the view for its own
// /upstreams (askMembers).
func (h *Handler) peerUpstreams() []status.PeerUpstreams {
	var out []status.PeerUpstreams
	for _, a := range h.askMembers("/upstreams?local=1") {
		p := status.PeerUpstreams{Node: a.node, Error: a.err}
		var pv status.Upstreams
		switch {
		case a.err != "":
		case json.Unmarshal(a.body, &pv) != nil:
			p.Error = fmt.Sprintf("%s answered what is not its view: %.200s", a.node, a.body)
		default:
			p.Upstreams = pv.Upstreams
		}
		out = append(out, p)
	}
	return out
}

// answer is a member's answer to a question askMembers asked: its body, or
// why there is none.
type answer struct {
	node string
	body []byte
	err  string
}

// askMembers asks every other member of the view for uri, all at once,
// each within OwnerViewTimeout, and returns their answers sorted by name:
// a member that does not answer 200 in time comes with the error. nil
// before a view.
func (h *Handler) askMembers(uri string) []answer {
	v := h.cfg.Peers.View()
	if v.Members == nil {
		return nil
	}
	var out []answer
	for _, m := range v.Members { // sorted by name
		if m != h.cfg.Node {
			out = append(out, answer{node: m})
		}
	}
	var wg sync.WaitGroup
	for i := range out {
		a := &out[i]
		if !v.Signed {
			a.err = "no cluster secret to ask it with"
			continue
		}
		wg.Go(func() {
			code, body, err := v.Ask(v.Addrs[a.node], a.node, uri, OwnerViewTimeout)
			switch {
			case err != nil:
				a.err = err.Error()
			case code != fasthttp.StatusOK:
				a.err = fmt.Sprintf("%s answered %d: %.200s", a.node, code, body)
			default:
				a.body = body
			}
		})
	}
	wg.Wait()
	return out
}
