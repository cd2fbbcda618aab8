package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// The README's first command must keep working: run the demo briefly and
// check it shows the rebalances, the drain and the auditor's table, and
// that the auditor found no tenant over its limit in any sliding window
// through the scale-up and the drain (no Redis: state moves peer to peer).
func TestDemoRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := Run(ctx, []string{"-window", "2s", "-windows", "3"}, &out); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if i := strings.Index(out.String(), "the auditor's view"); i >= 0 {
		t.Log(out.String()[i:])
	}
	for _, want := range []string{`"msg":"rebalance"`, "adding node-4", "draining node-2", `"msg":"drain"`,
		"drained cleanly: true", "the auditor's view", "acme", "globex", "initech",
		"verdict: every tenant within its limits in every sliding window"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
	// Every call's tokens are audited at its decision, found by the
	// x-request-id the provider saw.
	if strings.Contains(out.String(), "no decision on record") {
		t.Errorf("calls at the provider unmatched to a decision:\n%s", out.String())
	}
}
