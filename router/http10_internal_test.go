package router

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestHTTP10ClientGetsAStreamItCanRead: an HTTP/1.0 client cannot read a
// chunked body; a stream to it comes whole, with its length, from the owner
// and from an edge relaying the owner's.
func TestHTTP10ClientGetsAStreamItCanRead(t *testing.T) {
	t.Run("owner", func(t *testing.T) {
		addr := serveRouter(t, streamRouter(t, 20, time.Minute))
		// Three in a row on a tenant with 2 slots: each stream is settled
		// and its slot freed when it ends.
		for range 3 {
			checkHTTP10Stream(t, addr, "k", "gpt-4o")
		}
	})
	t.Run("edge", func(t *testing.T) {
		c := newPartCluster(t, 100, 2*time.Second)
		members := []Member{{Name: "a", Addr: c.addr["a"], State: "active"}, {Name: "b", Addr: c.addr["b"], State: "active"},
			{Name: "o", Addr: c.addr["o"], State: "active"}}
		for _, r := range c.r {
			r.SetView(View{Ring: c.ring, Members: members})
		}
		checkHTTP10Stream(t, c.addr["a"], "sk-"+c.tenant, "gpt-4o-mini")
		if n := len(c.fake.Records()); n != 1 {
			t.Fatalf("the provider saw %d calls, want 1 (through the owner)", n)
		}
	})
}

// checkHTTP10Stream sends a streamed chat request as HTTP/1.0 and fails
// unless the answer is a 200 whose event stream has its length (no chunks).
func checkHTTP10Stream(t *testing.T, addr, key, model string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	body := `{"model":"` + model + `","stream":true,"max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`
	_, err = io.WriteString(c, "POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\nAuthorization: Bearer "+key+
		"\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read the answer: %v (got %q)", err, raw)
	}
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(raw))), &http.Request{Method: "POST", ProtoMajor: 1, ProtoMinor: 0})
	if err != nil {
		t.Fatalf("parse %q: %v", raw, err)
	}
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || len(resp.TransferEncoding) > 0 || resp.ContentLength != int64(len(got)) {
		t.Fatalf("status %d, transfer-encoding %v, length %d of %d bytes; want 200 with its length:\n%s",
			resp.StatusCode, resp.TransferEncoding, resp.ContentLength, len(got), raw)
	}
	if !strings.Contains(string(got), "data: [DONE]") || strings.Contains(string(got), "\r\n0\r\n") {
		t.Fatalf("body is not the plain event stream:\n%s", got)
	}
}
