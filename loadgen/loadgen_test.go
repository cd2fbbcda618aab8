package loadgen

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ringgate/ringgate/fakeupstream"
)

// A load against the fake provider: every request answered 200, a line a
// second, and a total per key.
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
	if got := len(fake.Records()); got == 0 {
		t.Error("the fake saw no request")
	}
}

func TestRunRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-keys", ""},
		{"-rate", "0"},
		{"-duration", "0s"},
		{"-duration", "48h"},
	} {
		if err := Run(context.Background(), args, &bytes.Buffer{}); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
