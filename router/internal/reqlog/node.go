package reqlog

import (
	"bytes"
	"log/slog"
	"sync/atomic"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/router/internal/reply"
)

// Node tells of the requests of one node.
type Node struct {
	// Name is the node's name as its answers say it (x-ringgate-node).
	Name   []byte
	log    *slog.Logger
	clock  func() int64 // the node's, Unix ns
	ids    *Maker
	all    nodeCap
	access atomic.Bool
}

// New makes the teller of node name, writing to log on the node's clock
// (Unix ns); access: the access lines are on ([node] access_log).
func New(name string, log *slog.Logger, clock func() int64, access bool) *Node {
	n := &Node{Name: []byte(name), log: log, clock: clock, ids: NewMaker()}
	n.access.Store(access)
	return n
}

// SetNode names this node in an answer (x-ringgate-node).
func (n *Node) SetNode(h *fasthttp.ResponseHeader) { reply.SetNode(h, n.Name) }

// SetAccess turns the access lines on or off (a reload).
func (n *Node) SetAccess(on bool) { n.access.Store(on) }

// maxCode bounds the error code a line quotes from an answer.
const maxCode = 64

// errorCode is the "code" of the error body of resp, as OpenAI's error
// shape writes it, "" when it has none. It reads the body's first
// "code":"...", which is the error's in the bodies this node writes.
func errorCode(resp *fasthttp.Response) string {
	if resp.StatusCode() < 400 || resp.IsBodyStream() {
		return ""
	}
	b := resp.Body()
	i := bytes.Index(b, []byte(`"code":"`))
	if i < 0 {
		return ""
	}
	b = b[i+len(`"code":"`):]
	if j := bytes.IndexByte(b, '"'); j >= 0 && j <= maxCode {
		return string(b[:j])
	}
	return ""
}
