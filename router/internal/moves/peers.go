package moves

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/handoff"
	"github.com/ringgate/ringgate/router/internal/hopsign"
)

// HandoffPath receives a new owner's request for tenants' state; it is
// signed like a hop.
const HandoffPath = "/_ringgate/handoff"

// maxFetchTenants bounds one request's tenant list.
const maxFetchTenants = 1 << 16

type fetchMsg struct {
	Tenants []string `json:"tenants"`
}

// ErrNotReady: the node has not given its answer to hand-over requests
// yet (SetHandOver).
var ErrNotReady = errors.New("no hand-over yet")

// errNoPeer: the node asked for is not in this node's view.
var errNoPeer = errors.New("no address for peer")

// SetHandOver gives the node's answer to a peer asking for tenants' state
// (handoff.Mover.HandOver).
func (n *Node) SetHandOver(f func(asker string, tenants []string) []handoff.Reply) {
	n.handOver.Store(&f)
}

// SetTakeBack gives the node's way to take a tenant back at once from a
// node that bounced a request for it here (handoff.Mover.TakeBack).
func (n *Node) SetTakeBack(f func(tenant, other string) bool) {
	n.takeBack.Store(&f)
}

// TakeBack is what SetTakeBack gave, nil before.
func (n *Node) TakeBack() func(tenant, other string) bool {
	if f := n.takeBack.Load(); f != nil {
		return *f
	}
	return nil
}

// DecodeFetch reads the tenants a new owner asks for (ErrMalformed).
func DecodeFetch(body []byte) ([]string, error) {
	var m fetchMsg
	if err := json.Unmarshal(body, &m); err != nil || len(m.Tenants) > maxFetchTenants {
		return nil, ErrMalformed
	}
	return m.Tenants, nil
}

// HandOver answers the new owner asker asking for the tenants, after
// leaving(tenants) (what must stop before the state leaves), with the
// encoded replies; ErrNotReady before SetHandOver.
func (n *Node) HandOver(asker string, tenants []string, leaving func([]string)) ([]byte, error) {
	f := n.handOver.Load()
	if f == nil {
		return nil, ErrNotReady
	}
	leaving(tenants)
	replies := (*f)(asker, tenants)
	return handoff.EncodeReplies(nil, n.cfg.Self, n.clock(), replies), nil
}

// Fetch asks node to hand the tenants over to this node (handoff.Peers).
func (n *Node) Fetch(ctx context.Context, node string, tenants []string) ([]handoff.Reply, error) {
	v := n.cfg.Cluster.View()
	addr, _ := v.Addr(node)
	if addr == "" {
		return nil, fmt.Errorf("fetch from %s: %w", node, errNoPeer)
	}
	if !n.cfg.Peers.Signed() {
		return nil, fmt.Errorf("fetch from %s: %w", node, hopsign.ErrUnsigned)
	}
	timeout := time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("fetch from %s: %w", node, context.DeadlineExceeded)
	}
	status, body, err := n.cfg.Peers.Call(v, addr, node, HandoffPath, fetchMsg{Tenants: tenants}, 1, timeout)
	if err != nil {
		return nil, fmt.Errorf("fetch from %s: %w", node, err)
	}
	if status != fasthttp.StatusOK {
		return nil, fmt.Errorf("fetch from %s: status %d: %.200s", node, status, body)
	}
	replies, err := handoff.DecodeReplies(body)
	if err != nil {
		return nil, fmt.Errorf("fetch from %s: %w", node, err)
	}
	return replies, nil
}

// Others are the other members in this node's view, draining ones included
// (handoff.Peers).
func (n *Node) Others() []string {
	names := n.cfg.Cluster.View().Names()
	if names == nil {
		return nil
	}
	out := make([]string, 0, len(names))
	for _, m := range names {
		if m != n.cfg.Self {
			out = append(out, m)
		}
	}
	return out
}
