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
	"github.com/ringgate/ringgate/router/internal/reply"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// Fields in a chunked request's trailer are not read: not its key, not a
// header passed to the provider or a hop, not its queue class (RFC 9110
// §6.5.1; a request is decided before its body is read). Peek reads them,
// and reply.FirstHeaders, which replaced it, did not, so a key in a
// trailer was refused on the node's own path and an organization in a
// trailer was passed on a hop only (a reviewer's): neither is now.
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
	reply.FirstHeaders(&req.Header, keyHeaders[:], key[:])
	if key[0] != nil || key[1] != nil {
		t.Errorf("key read from the trailer: %q", key)
	}
	var hop fasthttp.Request
	reply.CopyHopHeaders(&hop, &req.Header, hopsign.SignedHeaderNames)
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
		reply.CopyHopHeaders(req, &client.Header, hopsign.SignedHeaderNames)
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
		reply.FirstHeaders(&client.Header, hopsign.SignedHeaderNames, ev)
		ov := make([][]byte, len(hopsign.SignedHeaderNames))
		reply.FirstHeaders(&got.Header, hopsign.SignedHeaderNames, ov)
		for i, name := range hopsign.SignedHeaderNames {
			if !bytes.Equal(ev[i], ov[i]) {
				t.Errorf("%q: %s edge %q owner %q", headers, name, ev[i], ov[i])
			}
		}
	}
}
