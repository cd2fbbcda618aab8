package reply

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/upstream"
)

// CopyHeaders copies an upstream answer's headers but for hop headers (and
// the provider's own x-ratelimit-*). fasthttp gives them with their names
// normalized already, as SetCanonical takes them.
func CopyHeaders(dst *fasthttp.ResponseHeader, src *fasthttp.ResponseHeader) {
	for k, v := range src.All() {
		if !upstream.IsHopHeader(k) {
			dst.SetCanonical(k, v)
		}
	}
}

// CopyPeerHeaders copies a peer's answer's headers but for those about
// one connection (isConnHeader) and those meant for this node only
// (private: a header between nodes).
func CopyPeerHeaders(dst *fasthttp.ResponseHeader, src *fasthttp.ResponseHeader, private [][]byte) {
	for k, val := range src.All() {
		if !isConnHeader(k) && !isOneOf(k, private) {
			dst.SetBytesKV(k, val)
		}
	}
}

// isConnHeader reports headers about one connection, which a relay must not
// copy (fasthttp sets its own framing).
func isConnHeader(k []byte) bool {
	return isOneOf(k, connHeaders)
}

func isOneOf(k []byte, names [][]byte) bool {
	for _, h := range names {
		if bytes.EqualFold(k, h) {
			return true
		}
	}
	return false
}

var connHeaders = [][]byte{
	[]byte("Connection"), []byte("Keep-Alive"), []byte("Transfer-Encoding"), []byte("Content-Length"),
	[]byte("Te"), []byte("Trailer"), []byte("Upgrade"), []byte("Date"), []byte("Server"),
}

// FirstHeaders sets vals[i] to h's first value of names[i] (a name as
// fasthttp writes the names it parses, matched in any case), as Peek
// would in the header section, in one pass over it: every Peek copies and
// normalizes its name, and these are read on every request. At most 32
// names. Fields in a chunked request's trailer are not read (Peek reads
// them): RFC 9110 §6.5.1 keeps authentication and routing out of
// trailers, and a request is decided before its body is read.
func FirstHeaders(h *fasthttp.RequestHeader, names, vals [][]byte) {
	var seen, all uint32 = 0, 1<<len(names) - 1
	for k, v := range h.All() {
		for i, name := range names {
			if seen&(1<<i) == 0 && len(k) == len(name) && (string(k) == string(name) || bytes.EqualFold(k, name)) {
				vals[i] = v
				seen |= 1 << i
			}
		}
		if seen == all {
			return
		}
	}
}

// CopyHopHeaders sets on req what a hop carries of the client's request
// besides its body: method, path and query, content type, and the headers
// the owner acts on (names, at most 16: the key, the queue class, those it
// sends on to the provider). Nothing else: the owner reads nothing else,
// and the hop's own headers must fit the owner's header buffer whatever
// the client sent (a 3.7 KiB cookie once made a request that its owner
// served when sent straight there fail when handed to it).
func CopyHopHeaders(req *fasthttp.Request, client *fasthttp.RequestHeader, names [][]byte) {
	req.Header.SetMethodBytes(client.Method())
	req.Header.SetRequestURIBytes(client.RequestURI())
	if ct := client.ContentType(); len(ct) > 0 {
		req.Header.SetContentTypeBytes(ct)
	}
	var buf [16][]byte // on the stack for the names a hop signs today
	vals := buf[:0]
	if len(names) > len(buf) {
		vals = make([][]byte, 0, len(names))
	}
	vals = vals[:len(names)]
	FirstHeaders(client, names, vals)
	for i, name := range names {
		if len(vals[i]) > 0 {
			req.Header.SetCanonical(name, vals[i])
		}
	}
}
