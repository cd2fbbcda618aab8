package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelpListsCommandsAndFlags: -h and -help exit 2 as the flag package
// has it, help exits 0; each prints every subcommand and a node's flags.
func TestHelpListsCommandsAndFlags(t *testing.T) {
	for _, tt := range []struct {
		args     []string
		status   int
		toStdout bool
	}{
		{[]string{"-h"}, 2, false},
		{[]string{"-help"}, 2, false},
		{[]string{"-config", "x.toml", "-h"}, 2, false},
		{[]string{"help"}, 0, true},
	} {
		var stdout, stderr bytes.Buffer
		if got := run(tt.args, &stdout, &stderr); got != tt.status {
			t.Errorf("%v: exit status %d, want %d", tt.args, got, tt.status)
		}
		out := stderr.String()
		if tt.toStdout {
			out = stdout.String()
		}
		want := []string{"-config", "-node", "-listen", "-gossip", "-advertise", "-join", "-redis"}
		for _, c := range []string{"demo", "fake-upstream", "load", "healthcheck", "help"} {
			want = append(want, "\n  ringgate "+c+" ")
		}
		for _, want := range want {
			if !strings.Contains(out, want) {
				t.Errorf("%v: usage lacks %q:\n%s", tt.args, want, out)
			}
		}
	}
}
