package admin

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/router/internal/reply"
	"github.com/ringgate/ringgate/router/internal/status"
	"github.com/ringgate/ringgate/router/internal/ui"
)

// The status page's tenants: how many /ui/state lists unless asked for
// fewer, at most how many it lists, and the longest name filter.
const (
	UITenants    = 300
	MaxUITenants = 1000
	maxUIFilter  = 200
)

// serveUIAsset answers one of the status page's files.
func serveUIAsset(ctx *fasthttp.RequestCtx, body []byte, contentType string) {
	h := &ctx.Response.Header
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	ctx.SetContentType(contentType)
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetBody(body)
}

// serveUIState answers GET /ui/state[?limit=N][&filter=S]: this node's own
// part (local: a member asking, or ?local=1), or the cluster's: the parts
// of every member, asked all at once, merged.
func (h *Handler) serveUIState(ctx *fasthttp.RequestCtx, local bool) {
	args := ctx.QueryArgs()
	limit := UITenants
	if b := args.Peek("limit"); b != nil {
		n, err := strconv.Atoi(string(b))
		if err != nil || n < 0 || n > MaxUITenants {
			reply.Fail(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "invalid_limit",
				fmt.Sprintf("limit must be a whole number from 0 to %d.", MaxUITenants))
			return
		}
		limit = n
	}
	filter := string(args.Peek("filter"))
	if len(filter) > maxUIFilter {
		reply.Fail(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "invalid_filter",
			fmt.Sprintf("filter is at most %d bytes.", maxUIFilter))
		return
	}
	own := h.cfg.Source.UINode(h.owns, filter, limit)
	if local {
		reply.JSON(ctx, fasthttp.StatusOK, own)
		return
	}
	uri := "/ui/state?local=1&limit=" + strconv.Itoa(limit) + "&filter=" + url.QueryEscape(filter)
	parts := []status.UINode{own}
	for _, a := range h.askMembers(uri) {
		p := status.UINode{Node: a.node, Error: a.err}
		if a.err == "" && json.Unmarshal(a.body, &p) != nil {
			p = status.UINode{Node: a.node, Error: fmt.Sprintf("%s answered what is not its part: %.200s", a.node, a.body)}
		}
		parts = append(parts, p)
	}
	reply.JSON(ctx, fasthttp.StatusOK, h.mergeUI(parts, limit))
}

// mergeUI is the cluster's /ui/state from the members' parts: their
// tenants together, busiest first, a tenant two members say they own (a
// ring change under way) shown and counted once, as the owner by this
// node's ring sees it. A duplicate outside the parts' lists stays in the
// totals: nothing names it.
func (h *Handler) mergeUI(parts []status.UINode, limit int) status.UI {
	out := status.UI{Cluster: h.cfg.Source.Cluster(), Tenants: []status.Tenant{}}
	at := map[string]int{}
	for i := range parts {
		p := &parts[i]
		out.TenantsMatched += p.Matched
		out.Totals.Sum(p.Totals)
		for _, t := range p.Tenants {
			j, seen := at[t.Name]
			if !seen {
				at[t.Name] = len(out.Tenants)
				out.Tenants = append(out.Tenants, t)
				continue
			}
			dropped := t
			if h.cfg.Peers.Owner(t.Name) == t.Owner {
				dropped, out.Tenants[j] = out.Tenants[j], t
			}
			out.Totals.Remove(status.UsageOfTenant(dropped), dropped.Queued)
			out.TenantsMatched--
		}
		p.Tenants, p.Matched, p.Totals = nil, 0, status.Totals{}
	}
	slices.SortFunc(out.Tenants, func(a, b status.Tenant) int {
		return status.Busier(status.UsageOfTenant(a), a.Queued, a.Name, status.UsageOfTenant(b), b.Queued, b.Name)
	})
	out.Tenants = out.Tenants[:min(limit, len(out.Tenants))]
	out.TenantsLeftOut = max(0, out.TenantsMatched-len(out.Tenants))
	slices.SortFunc(parts, func(a, b status.UINode) int { return strings.Compare(a.Node, b.Node) })
	out.Nodes = parts
	return out
}

// uiAsset answers the status page's files, and reports whether path was
// one. They hold no data: with an admin token configured anyone may load
// them (a browser cannot send the token on a navigation; the page's
// script sends it with each question); without one, as for every admin
// path, only a loopback caller.
func (h *Handler) uiAsset(ctx *fasthttp.RequestCtx, path string) bool {
	body, contentType, ok := ui.Asset(path)
	switch {
	case !ok || string(ctx.Method()) != fasthttp.MethodGet:
		return false
	case h.cfg.Token() == "" && !loopback(ctx):
		reply.Fail(ctx, fasthttp.StatusUnauthorized, "invalid_request_error", "invalid_admin_token",
			"With no admin token configured, the status page answers loopback callers only.")
	default:
		serveUIAsset(ctx, body, contentType)
	}
	return true
}
