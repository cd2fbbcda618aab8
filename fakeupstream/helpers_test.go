package fakeupstream

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// start serves a new Server on a free loopback port and closes it when the
// test ends.
func start(t *testing.T, o Options) (*Server, string) {
	t.Helper()
	s := New(o)
	addr, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s, "http://" + addr
}

var client = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 16},
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func do(t *testing.T, method, url, body string, header map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return response{resp.StatusCode, resp.Header, b}
}

func post(t *testing.T, url, body string) response {
	t.Helper()
	return do(t, http.MethodPost, url, body, nil)
}

type event struct {
	name string // the "event:" field, empty for OpenAI
	data string
}

// readEvent reads one SSE event; io.EOF at the end of the stream.
func readEvent(r *bufio.Reader) (event, error) {
	var ev event
	seen := false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if err == io.EOF && seen {
				return ev, io.ErrUnexpectedEOF
			}
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if seen {
				return ev, nil
			}
		case strings.HasPrefix(line, "event: "):
			ev.name, seen = line[len("event: "):], true
		case strings.HasPrefix(line, "data: "):
			ev.data, seen = line[len("data: "):], true
		default:
			return ev, io.ErrUnexpectedEOF
		}
	}
}

func parseEvents(t *testing.T, body []byte) []event {
	t.Helper()
	r := bufio.NewReader(bytes.NewReader(body))
	var evs []event
	for {
		ev, err := readEvent(r)
		if err == io.EOF {
			return evs
		}
		if err != nil {
			t.Fatalf("malformed SSE stream after %d events: %v\n%s", len(evs), err, body)
		}
		evs = append(evs, ev)
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// openStream starts a streamed request and returns the response, whose body
// the caller reads and closes.
func openStream(t *testing.T, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	// A transport of its own: closing the body closes this connection only.
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("POST %s: status %d: %s", url, resp.StatusCode, b)
	}
	return resp
}
