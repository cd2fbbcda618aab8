package router

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Request headers past the server's 4 KiB get 431 (RFC 6585), in OpenAI's
// error shape, and the connection closed; a malformed request still gets
// 400.
func TestHeaderSizeAnswers(t *testing.T) {
	r, _ := testRouter(t, Options{})
	addr := serveRouter(t, r)
	cases := []struct {
		name     string
		request  string
		status   int
		code     string
		wantBody bool
	}{
		{"headers over 4 KiB", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nCookie: c=" + strings.Repeat("a", 5000) + "\r\nContent-Length: 2\r\n\r\n{}",
			http.StatusRequestHeaderFieldsTooLarge, "request_header_fields_too_large", true},
		{"malformed", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
			http.StatusBadRequest, "bad_request", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(conn, c.request); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct {
				Error struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatalf("body not OpenAI's error shape: %v", err)
			}
			if resp.StatusCode != c.status || body.Error.Code != c.code || !resp.Close {
				t.Fatalf("got %d %q close=%v, want %d %q and the connection closed", resp.StatusCode, body.Error.Code, resp.Close, c.status, c.code)
			}
		})
	}
}
