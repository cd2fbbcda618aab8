package loadgen

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ringgate/ringgate/fakeupstream"
)

// A load against the fake provider: every request answered 200, a legend,
// the column header, a line a second, and a total per key.
func TestRunAgainstFake(t *testing.T) {
	fake := fakeupstream.New(fakeupstream.Options{CompletionMin: 5, CompletionMax: 5})
	addr, err := fake.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	var out bytes.Buffer
	err = Run(context.Background(), []string{"-url", "http://" + addr, "-keys", "sk-a, sk-b", "-rate", "40", "-duration", "1200ms"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	total := lines[len(lines)-1]
	t.Logf("%s", out.String())
	if len(lines) < 2 || !strings.HasPrefix(total, "total  sk-a 200:") || !strings.Contains(total, "| sk-b 200:") ||
		strings.Contains(total, "failed") || strings.Contains(total, "skipped") {
		t.Errorf("output:\n%s\nwant a line a second and a total of 200s for both keys", out.String())
	}
	if !strings.HasPrefix(out.String(), "# ringgate load: 2 keys, 40 requests a second each") ||
		!strings.Contains(out.String(), "\n"+header+"\n") {
		t.Errorf("output:\n%s\nwant the legend, then the columns' header", out.String())
	}
	if got := len(fake.Records()); got == 0 {
		t.Error("the fake saw no request")
	}
}

// Each second's line counts what came back in that second by status, the
// answers that waited in a queue and the longest wait; each window's block
// gives every key's 200s and the nodes that enforced it, in the order
// seen.
func TestRunExplainsItsNumbers(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := n.Add(1)
		node := "node-2"
		if i > 20 {
			node = "node-4" // the tenant moved
		}
		w.Header().Set("x-ringgate-node", node)
		switch {
		case r.Header.Get("Authorization") == "Bearer sk-b":
			w.Header().Set("x-ringgate-queued-ms", "1500")
			w.WriteHeader(http.StatusTooManyRequests)
		case i%10 == 0:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.Header().Set("x-ringgate-queued-ms", "250")
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer srv.Close()
	var out bytes.Buffer
	err := Run(context.Background(), []string{"-url", srv.URL, "-keys", "sk-a,sk-b", "-rate", "20", "-duration", "2500ms", "-window", "2s"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", out.String())
	text := out.String()
	for _, want := range []string{
		"# Every 2s (the tenants' limit window)",
		"window 0s-2s: 200s per key in the window",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// A second's row: time, sent, 200, 429, waited, longest, failed,
	// skipped, other.
	rowRE := regexp.MustCompile(`(?m)^ +\d+\.\ds +(\d+) +(\d+) +(\d+) +(\d+) +(\S+) +0 +0  (\S.*)$`)
	rows := rowRE.FindAllStringSubmatch(text, -1)
	if len(rows) < 2 {
		t.Fatalf("%d rows a second, want at least 2", len(rows))
	}
	r := rows[1] // a whole second in
	if r[1] == "0" || r[2] == "0" || r[3] == "0" || r[4] == "0" || r[5] != "1.5s" {
		t.Errorf("row %q: want requests sent, 200s, 429s and waits counted, the longest 1.5s", r[0])
	}
	if !strings.Contains(text, "503:") {
		t.Error("no row names the 503s in its other column")
	}
	block := regexp.MustCompile(`(?m)^  sk-a +(\d+)  node-2 -> node-4$`)
	if !block.MatchString(text) {
		t.Error("no window shows sk-a moving from node-2 to node-4")
	}
	if !regexp.MustCompile(`(?m)^  sk-b +0  node-`).MatchString(text) {
		t.Error("sk-b, refused throughout, should show 0 200s in a window")
	}
}

func TestRunRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-keys", ""},
		{"-rate", "0"},
		{"-duration", "0s"},
		{"-duration", "48h"},
		{"-window", "10ms"},
	} {
		if err := Run(context.Background(), args, &bytes.Buffer{}); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
