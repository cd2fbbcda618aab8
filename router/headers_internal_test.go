package router

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/router/internal/hopsign"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// An upstream answer's headers reach the client but for those that
// describe the connection, the provider's own rate-limit headers and the
// gateway's own, whatever their case (copyHeaders; a reviewer's answers).
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
		kept: map[string]string{"Content-Type": "application/json", "Openai-Processing-Ms": "12", "X-Request-Id": "r1",
			"Retry-After": "7", "X_under_score": "u", "Vary": "Origin", "X-Ratelimit": "no-dash"},
		gone: map[string]string{"Content-Encoding": "", "Set-Cookie": "", "Server": "", "Keep-Alive": "", "Alt-Svc": "",
			"Upgrade": "", "Te": "", "Proxy-Connection": "", "X-Ratelimit-Remaining-Requests": "",
			"X-Ratelimit-Limit-Requests": "10", "X-Ringgate-Node": "n1"},
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
		r := &Router{nodeName: []byte("n1")}
		var out fasthttp.Response
		r.setNodeHeader(&out.Header)
		out.Header.Set("X-Ratelimit-Limit-Requests", "10") // ringgate's own, set before
		copyHeaders(&out.Header, &up.Header)
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

// firstHeaders finds what Peek finds, for every name, whatever the case,
// repetition or emptiness of the request's headers.
func TestFirstHeadersAsPeek(t *testing.T) {
	names := [][]byte{[]byte("Authorization"), []byte("X-Api-Key"), []byte(hopHeader), []byte(sigHeader)}
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
		firstHeaders(&req.Header, names, vals)
		for i, name := range names {
			if got, want := string(vals[i]), string(req.Header.PeekBytes(name)); got != want {
				t.Errorf("%q: %s = %q, Peek says %q", headers, name, got, want)
			}
		}
	}
}

// Fields in a chunked request's trailer are not read: not its key, not a
// header passed to the provider or a hop, not its queue class (RFC 9110
// §6.5.1; a request is decided before its body is read). Peek reads them,
// and firstHeaders, which replaced it, did not, so a key in a trailer was
// refused on the node's own path and an organization in a trailer was
// passed on a hop only (a reviewer's): neither is now.
func TestTrailerFieldsNotRead(t *testing.T) {
	const raw = "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n" +
		"Trailer: X-Api-Key, Openai-Organization, X-Ringgate-Priority\r\n\r\n2\r\n{}\r\n0\r\n" +
		"X-Api-Key: sk-trailer\r\nOpenai-Organization: org-t\r\nX-Ringgate-Priority: batch\r\n\r\n"
	var req fasthttp.Request
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatal(err)
	}
	if string(req.Header.Peek("X-Api-Key")) != "sk-trailer" {
		t.Fatal("the trailer was not parsed: the test shows nothing")
	}
	var key [2][]byte
	firstHeaders(&req.Header, keyHeaders[:], key[:])
	if key[0] != nil || key[1] != nil {
		t.Errorf("key read from the trailer: %q", key)
	}
	var hop fasthttp.Request
	copyHopHeaders(&hop, &req.Header)
	for _, name := range []string{"X-Api-Key", "Openai-Organization", priorityHeader} {
		if v := hop.Header.Peek(name); len(v) > 0 {
			t.Errorf("a hop carries the trailer's %s: %q", name, v)
		}
	}
	if c := classOf(&tenant.Tenant{}, &req.Header); c != queue.Interactive {
		t.Errorf("class %v from the trailer's priority, want interactive", c)
	}
}

// A hop made from a client request whose signed headers repeat, differ in
// case, are empty or come in a trailer verifies on the owner, over the
// wire, and the owner reads the values the edge read (a reviewer's).
func TestHopVerifiesOddHeaders(t *testing.T) {
	now := time.Now()
	secret := []byte("0123456789abcdef0123456789abcdef")
	for _, headers := range []string{
		"authorization: Bearer a\r\nAUTHORIZATION: Bearer b\r\nx-API-key: k\r\nX-Api-Key: k2\r\n",
		"Authorization:\r\nAuthorization: Bearer late\r\nOpenAI-Organization: org1\r\nopenai-organization: org2\r\n",
		"Authorization: Bearer a\r\nX-RINGGATE-PRIORITY: batch\r\nx-ringgate-priority: interactive\r\nACCEPT: text/event-stream\r\naccept: */*\r\nAnthropic-Version: 1\r\nANTHROPIC-BETA: b1\r\nOpenAI-Beta: x\r\nOpenai-Project: p\r\n",
		"Authorization: Bearer a\r\nTrailer: X-Api-Key, Openai-Project\r\nTransfer-Encoding: chunked\r\n",
		"Trailer: Openai-Organization\r\nOpenai-Organization: upfront\r\nAuthorization: Bearer a\r\n",
	} {
		raw := "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: gw\r\n" + headers
		if strings.Contains(headers, "chunked") {
			raw += "\r\n2\r\n{}\r\n0\r\nX-Api-Key: sk-t\r\nOpenai-Project: pt\r\n\r\n"
		} else {
			raw += "Content-Length: 2\r\n\r\n{}"
		}
		var client fasthttp.Request
		if err := client.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			t.Fatal(err)
		}
		edge := hopsign.New(secret, 5*time.Second, func() time.Time { return now })
		owner := hopsign.New(secret, 5*time.Second, func() time.Time { return now })
		req := fasthttp.AcquireRequest()
		copyHopHeaders(req, &client.Header)
		req.Header.SetHost("owner:1")
		req.SetBodyRaw(client.Body())
		edge.Sign(req, "a", "b", 7, 1)
		var wire bytes.Buffer
		if _, err := req.WriteTo(&wire); err != nil {
			t.Fatal(err)
		}
		var got fasthttp.Request
		if err := got.Read(bufio.NewReader(&wire)); err != nil {
			t.Fatal(err)
		}
		if _, err := owner.Verify(&got, "b"); err != nil {
			t.Errorf("%q: %v\n%s", headers, err, got.Header.String())
		}
		ev := make([][]byte, len(hopsign.SignedHeaderNames))
		firstHeaders(&client.Header, hopsign.SignedHeaderNames, ev)
		ov := make([][]byte, len(hopsign.SignedHeaderNames))
		firstHeaders(&got.Header, hopsign.SignedHeaderNames, ov)
		for i, name := range hopsign.SignedHeaderNames {
			if !bytes.Equal(ev[i], ov[i]) {
				t.Errorf("%q: %s edge %q owner %q", headers, name, ev[i], ov[i])
			}
		}
	}
}
