package router

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ringgate/ringgate/router/internal/reply"
)

func rawPost(method, proto string) string {
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	return method + " /v1/chat/completions " + proto + "\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// Pipelined large JSON answers, an HTTP/1.0 client, and a HEAD.
func TestProgressBodyProtocols(t *testing.T) {
	r := streamRouter(t, 200_000, 2*time.Second) // ~800 KB answers
	addr := serveRouter(t, r)

	t.Run("pipelined", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte(rawPost("POST", "HTTP/1.1") + rawPost("POST", "HTTP/1.1") + rawPost("POST", "HTTP/1.1"))); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		br := bufio.NewReader(conn)
		for i := range 3 {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("answer %d: %v", i, err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			t.Logf("answer %d: %d, %d of %d bytes (%v)", i, resp.StatusCode, n, resp.ContentLength, err)
			if resp.StatusCode != 200 || n != resp.ContentLength || n < reply.AnswerBuffered {
				t.Errorf("answer %d incomplete", i)
			}
			if i == 0 {
				time.Sleep(2500 * time.Millisecond) // past the idle: the deadline must have been cleared
			}
		}
	})
	t.Run("http/1.0", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte(rawPost("POST", "HTTP/1.0"))); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		t.Logf("HTTP/1.0: %d, %d of %d bytes, close %v", resp.StatusCode, n, resp.ContentLength, resp.Close)
		if resp.StatusCode != 200 || n < reply.AnswerBuffered || (resp.ContentLength >= 0 && n != resp.ContentLength) {
			t.Errorf("HTTP/1.0 answer incomplete")
		}
	})
	t.Run("head", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte(rawPost("HEAD", "HTTP/1.1") + rawPost("POST", "HTTP/1.1"))); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, &http.Request{Method: "HEAD"})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		t.Logf("HEAD: %d, Content-Length %d", resp.StatusCode, resp.ContentLength)
		resp, err = http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("the request after the HEAD: %v", err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		t.Logf("after HEAD: %d, %d of %d bytes", resp.StatusCode, n, resp.ContentLength)
		if resp.StatusCode != 200 || n != resp.ContentLength {
			t.Errorf("the answer after a HEAD is broken")
		}
	})
}

// A client that closes mid-answer: the write fails, the next connection is
// served.
func TestProgressBodyClientCloses(t *testing.T) {
	r := streamRouter(t, 2_000_000, 2*time.Second) // ~8 MB
	addr := serveRouter(t, r)
	for i := range 2 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write([]byte(rawPost("POST", "HTTP/1.1"))); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		n, err := io.CopyN(io.Discard, conn, 300<<10)
		conn.Close()
		t.Logf("connection %d: read %d bytes then closed (%v)", i, n, err)
		if n != 300<<10 {
			t.Fatalf("connection %d not answered", i)
		}
	}
}
