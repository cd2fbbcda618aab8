package node

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/ringgate/ringgate/fakeupstream"
)

// startStream starts a streamed chat request over proto on a raw
// connection to n, and returns the connection once the call is at the
// provider (its first event read, for HTTP/1.1; HTTP/1.0 gets the stream
// whole at its end).
func startStream(t *testing.T, n *Node, fake *fakeupstream.Server, proto string, maxTokens int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	body := `{"model":"gpt-4o-mini","max_tokens":` + strconv.Itoa(maxTokens) + `,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	_, err = io.WriteString(c, "POST /v1/chat/completions "+proto+"\r\nHost: x\r\nAuthorization: Bearer "+benchKey+
		"\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	if proto == "HTTP/1.0" {
		for fake.InFlight() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the call did not reach the provider")
			}
			time.Sleep(5 * time.Millisecond)
		}
		return c
	}
	buf := make([]byte, 64<<10)
	var got []byte
	_ = c.SetReadDeadline(deadline)
	for !bytes.Contains(got, []byte("data: ")) {
		k, err := c.Read(buf)
		if err != nil {
			t.Fatalf("stream did not start: %v (%q)", err, got)
		}
		got = append(got, buf[:k]...)
	}
	return c
}

// TestCloseCutsStreams: Close stops the node at once, cutting what is in
// flight (a crash, to its clients), whatever the client's HTTP version.
// (With the HTTP/1.0 stream on a hijacked connection, found by a reviewer,
// it went on streaming after Close.)
func TestCloseCutsStreams(t *testing.T) {
	for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
		t.Run(proto, func(t *testing.T) {
			fake := fakeupstream.New(fakeupstream.Options{CompletionMin: 400, CompletionMax: 400, ChunkInterval: 20 * time.Millisecond})
			upAddr, err := fake.Start("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer fake.Close()
			n, err := Start(benchConfig("close-1", upAddr), benchOptions())
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			c := startStream(t, n, fake, proto, 400)
			_ = n.Close()
			// The connection ends, EOF or a reset, within 3 s; nothing of
			// the stream after the Close (HTTP/1.0: nothing at all).
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			buf := make([]byte, 64<<10)
			after := 0
			for {
				k, err := c.Read(buf)
				after += k
				if err == nil {
					continue
				}
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatalf("%s stream still open 3s after Close (%d bytes more received)", proto, after)
				}
				if proto == "HTTP/1.0" && after > 0 {
					t.Fatalf("HTTP/1.0 client got %d bytes after Close", after)
				}
				return
			}
		})
	}
}

// TestDrainWaitsForStreams: Drain waits for a stream in flight to end, and
// the client gets all of it, whatever its HTTP version.
func TestDrainWaitsForStreams(t *testing.T) {
	for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
		t.Run(proto, func(t *testing.T) {
			fake := fakeupstream.New(fakeupstream.Options{CompletionMin: 100, CompletionMax: 100, ChunkInterval: 5 * time.Millisecond})
			upAddr, err := fake.Start("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer fake.Close()
			cfg := benchConfig("drain-1", upAddr)
			cfg.Node.DrainTimeout = 10 * time.Second
			n, err := Start(cfg, Options{Logger: benchOptions().Logger, DrainGrace: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			c := startStream(t, n, fake, proto, 100)
			clean := make(chan bool, 1)
			go func() { clean <- n.Drain() }()
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			rest, err := io.ReadAll(c)
			if err != nil || !bytes.Contains(rest, []byte("data: [DONE]")) {
				t.Fatalf("stream cut by the drain: %v, %d bytes, [DONE] %v", err, len(rest), bytes.Contains(rest, []byte("data: [DONE]")))
			}
			select {
			case ok := <-clean:
				if !ok {
					t.Fatal("drain not clean")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("drain did not end")
			}
		})
	}
}
