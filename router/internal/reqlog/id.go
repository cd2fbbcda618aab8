package reqlog

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// Header carries a request's id, written as fasthttp writes it.
const Header = "X-Request-Id"

var hID = []byte(Header)

// MaxID bounds a client's id: a longer one is ignored.
const MaxID = 128

// Sane reports whether b may serve as a request id: 1 to MaxID bytes of
// printable ASCII without spaces, so that it fits a log line and a
// header as it is.
func Sane(b []byte) bool {
	if len(b) == 0 || len(b) > MaxID {
		return false
	}
	for _, c := range b {
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// Maker makes the ids of one process: a prefix drawn once, and a
// counter, so that an id costs no system call.
type Maker struct {
	prefix []byte // "rg-", 12 random hex digits, "-"
	n      atomic.Uint64
}

// NewMaker makes a Maker with its own random prefix.
func NewMaker() *Maker {
	var r [6]byte
	_, _ = rand.Read(r[:]) // crypto/rand.Read does not fail on supported platforms
	p := append([]byte("rg-"), hex.EncodeToString(r[:])...)
	return &Maker{prefix: append(p, '-')}
}

// Append appends a new id to dst: unique in this process, and across
// processes as far as their prefixes differ.
func (m *Maker) Append(dst []byte) []byte {
	return strconv.AppendUint(append(dst, m.prefix...), m.n.Add(1), 36)
}

// SetID names a request on its answer (resp): the id req carries when it
// is sane, else a new one.
func (n *Node) SetID(req *fasthttp.RequestHeader, resp *fasthttp.ResponseHeader) {
	if id := req.PeekBytes(hID); Sane(id) {
		resp.SetCanonical(hID, id)
		return
	}
	var buf [40]byte
	resp.SetCanonical(hID, n.ids.Append(buf[:0]))
}

// ID is the id a request was named with (SetID) on its answer resp.
func ID(resp *fasthttp.ResponseHeader) []byte { return resp.PeekBytes(hID) }

// CopyID carries a request's id (on its answer, resp) on a request it
// makes: a hop to the owner, the call to the provider. A hop does not
// sign it: it labels log lines only, and the owner checks it as it
// checks a client's (SetID).
func CopyID(to *fasthttp.RequestHeader, resp *fasthttp.ResponseHeader) {
	if id := ID(resp); len(id) > 0 {
		to.SetCanonical(hID, id)
	}
}

// ResetKeepID resets resp, but for the request's id.
func ResetKeepID(resp *fasthttp.ResponseHeader) {
	var buf [MaxID]byte
	id := append(buf[:0], ID(resp)...)
	resp.Reset()
	if len(id) > 0 {
		resp.SetCanonical(hID, id)
	}
}
