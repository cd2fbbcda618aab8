package fakeupstream

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// runCLI starts run (Run or Main) in the background and returns the address
// it printed and a channel with run's result.
func runCLI(t *testing.T, run func(stdout io.Writer) error) (string, <-chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(pw)
		pw.CloseWithError(io.EOF)
		done <- err
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatalf("no address printed; run returned %v", <-done)
		}
		addr, found := strings.CutPrefix(line, "fake-upstream listening on ")
		if !found {
			t.Fatalf("unexpected first line %q", line)
		}
		return addr, done
	case <-time.After(10 * time.Second):
		t.Fatal("no address printed")
	}
	return "", nil
}

func wait(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not stop")
	}
}

func TestRunServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done := runCLI(t, func(w io.Writer) error {
		return Run(ctx, []string{"-listen", "127.0.0.1:0", "-latency", "1ms", "-chunk-interval", "1ms",
			"-completion-min", "4", "-completion-max", "4", "-no-usage", "-seed", "7"}, w)
	})
	r := post(t, "http://"+addr+"/v1/chat/completions", `{"messages":[]}`)
	j := gjson.ParseBytes(r.body)
	if r.status != 200 || j.Get("choices.0.message.content").String() != GeneratedText(4) || j.Get("usage").Exists() {
		t.Fatalf("%d %s", r.status, r.body)
	}
	cancel()
	wait(t, done)
	if _, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader("{}")); err == nil {
		t.Error("still serving after Run returned")
	}
}

func TestRunBadArgs(t *testing.T) {
	for _, args := range [][]string{
		{"-latency", "soon"},
		{"-bogus"},
		{"extra"},
		{"-listen", "256.0.0.1:bad"},
	} {
		if err := Run(context.Background(), args, io.Discard); err == nil {
			t.Errorf("Run(%q) succeeded", args)
		}
	}
	if err := Run(context.Background(), []string{"-h"}, io.Discard); err != nil {
		t.Errorf("-h: %v", err)
	}
}
