package router

import (
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

// A malformed request's bytes never reach the log (fasthttp quotes them in
// its error: the tenant's key with them), and a client sending many gets
// one line a second.
func TestMalformedRequestNotLogged(t *testing.T) {
	var logs syncBuffer
	r, _ := testRouter(t, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	addr := serveRouter(t, r)
	const secret = "sk-secret-tenant-key-0123456789"
	bad := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + secret +
		"\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}"
	for range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = c.Write([]byte(bad))
		buf := make([]byte, 512)
		n, _ := c.Read(buf)
		_ = c.Close()
		if !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 400") {
			t.Fatalf("answer %q, want 400", buf[:n])
		}
	}
	out := logs.String()
	if strings.Contains(out, secret) {
		t.Fatalf("the tenant's key is in the log:\n%s", out)
	}
	if n := strings.Count(out, `"msg":"http"`); n < 1 || n > 2 {
		t.Errorf("%d http lines for 20 malformed requests within a second, want 1 (or 2 across a second)\n%s", n, out)
	}
	t.Logf("log: %s", out)
}

// The same for a request line without a version: fasthttp quotes the whole
// header buffer inside its own error, before the ", contents:" the first
// redaction cut at (found by a reviewer).
func TestMalformedRequestLineNotLogged(t *testing.T) {
	var logs syncBuffer
	r, _ := testRouter(t, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	addr := serveRouter(t, r)
	const secret = "sk-secret-tenant-key-0123456789"
	bad := "POST /v1/chat/completions\r\nAuthorization: Bearer " + secret + "\r\nContent-Length: 2\r\n\r\n{}"
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	_, _ = c.Write([]byte(bad))
	buf := make([]byte, 512)
	_, _ = c.Read(buf)
	_ = c.Close()
	if !poll(2*time.Second, func() bool { return strings.Contains(logs.String(), `"msg":"http"`) }) {
		t.Fatalf("no http line logged: %s", logs.String())
	}
	if out := logs.String(); strings.Contains(out, secret) {
		t.Fatalf("the tenant's key is in the log:\n%s", out)
	}
}
