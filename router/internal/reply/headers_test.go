package reply

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// An upstream answer's headers reach the client but for those that
// describe the connection, the provider's own rate-limit headers and the
// gateway's own, whatever their case (CopyHeaders).
func TestCopyHeadersKeepsTheMessagesOwn(t *testing.T) {
	for _, tc := range []struct {
		answer     string
		kept, gone map[string]string // gone: the name, and what the client sees instead ("" none)
	}{{
		answer: "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nCONTENT-ENCODING: gzip\r\nset-cookie: a=1\r\nSet-Cookie: b=2\r\n" +
			"server: up\r\ndate: Mon, 01 Jan 2024 00:00:00 GMT\r\nconnection: keep-alive, Upgrade\r\nkeep-alive: timeout=5\r\n" +
			"x-ratelimit-remaining-requests: 3\r\nX-RateLimit-Limit-Requests: 9\r\nopenai-processing-ms: 12\r\nx-request-id: r1\r\n" +
			"retry-after: 7\r\nx-ringgate-node: upstream\r\nalt-svc: h3\r\nx_under_score: u\r\nvary: Origin\r\n" +
			"upgrade: h2c\r\nte: trailers\r\nproxy-connection: close\r\nx-ratelimit: no-dash\r\ncontent-length: 2\r\n\r\n{}",
		kept: map[string]string{"Content-Type": "application/json", "Openai-Processing-Ms": "12",
			"Retry-After": "7", "X_under_score": "u", "Vary": "Origin", "X-Ratelimit": "no-dash"},
		gone: map[string]string{"Content-Encoding": "", "Set-Cookie": "", "Server": "", "Keep-Alive": "", "Alt-Svc": "",
			"Upgrade": "", "Te": "", "Proxy-Connection": "", "X-Ratelimit-Remaining-Requests": "",
			"X-Ratelimit-Limit-Requests": "10", "X-Ringgate-Node": "n1", "X-Request-Id": "rg-1"},
	}, {
		answer: "HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n" +
			"Trailer: X-Usage\r\nConnection: close\r\nX-Stainless-Thing: s\r\n\r\n2\r\n{}\r\n0\r\nX-Usage: 5\r\n\r\n",
		kept: map[string]string{"Content-Type": "text/event-stream; charset=utf-8", "X-Stainless-Thing": "s"},
		gone: map[string]string{"Transfer-Encoding": "", "Trailer": "", "X-Usage": ""},
	}} {
		var up fasthttp.Response
		if err := up.Read(bufio.NewReader(strings.NewReader(tc.answer))); err != nil {
			t.Fatal(err)
		}
		var out fasthttp.Response
		SetNode(&out.Header, []byte("n1"))
		out.Header.Set("X-Request-Id", "rg-1")             // the request's, named before
		out.Header.Set("X-Ratelimit-Limit-Requests", "10") // ringgate's own, set before
		CopyHeaders(&out.Header, &up.Header)
		for name, want := range tc.kept {
			if got := string(out.Header.Peek(name)); got != want {
				t.Errorf("%s: %q, want the provider's %q", name, got, want)
			}
		}
		for name, want := range tc.gone {
			if got := string(out.Header.Peek(name)); got != want {
				t.Errorf("%s: %q, want %q", name, got, want)
			}
		}
		if strings.Contains(strings.ToLower(out.Header.String()), "connection: keep-alive, upgrade") {
			t.Errorf("the provider's Connection header passed:\n%s", out.Header.String())
		}
	}
}

// FirstHeaders finds what Peek finds, for every name, whatever the case,
// repetition or emptiness of the request's headers.
func TestFirstHeadersAsPeek(t *testing.T) {
	names := [][]byte{[]byte("Authorization"), []byte("X-Api-Key"), []byte("X-Ringgate-Hop"), []byte("X-Ringgate-Signature")}
	for _, headers := range []string{
		"",
		"Authorization: Bearer a\r\n",
		"authorization: Bearer a\r\nAUTHORIZATION: Bearer b\r\nx-api-key: k\r\n",
		"Authorization:\r\nAuthorization: Bearer late\r\nX-Api-Key: \r\n",
		"x-ringgate-hop: n1,1,2\r\nX-RINGGATE-SIGNATURE: s\r\nCookie: a=1\r\nX-Other: o\r\n",
		"X-Ringgate-Signature: only\r\nUser-Agent: u\r\n",
	} {
		raw := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" + headers + "Content-Length: 0\r\n\r\n"
		var req fasthttp.Request
		if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			t.Fatal(err)
		}
		vals := make([][]byte, len(names))
		FirstHeaders(&req.Header, names, vals)
		for i, name := range names {
			if got, want := string(vals[i]), string(req.Header.PeekBytes(name)); got != want {
				t.Errorf("%q: %s = %q, Peek says %q", headers, name, got, want)
			}
		}
	}
}

// A hop carries every name it is given, however many: the values are
// read onto the stack only while they fit there.
func TestCopyHopHeadersAnyNumberOfNames(t *testing.T) {
	var client fasthttp.RequestHeader
	client.SetMethod(fasthttp.MethodPost)
	client.SetRequestURI("/v1/chat/completions")
	var names [][]byte
	for i := range 20 {
		name := fmt.Sprintf("X-Signed-%d", i)
		names = append(names, []byte(name))
		client.Set(name, strconv.Itoa(i))
	}
	var req fasthttp.Request
	CopyHopHeaders(&req, &client, names)
	for i, name := range names {
		if got := string(req.Header.PeekBytes(name)); got != strconv.Itoa(i) {
			t.Errorf("%s = %q, want %d", name, got, i)
		}
	}
}
