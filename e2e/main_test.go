//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binary is the ringgate binary TestMain builds once for every test.
var binary string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ringgate-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "ringgate")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Dir = ".." // the module root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: go build -o", binary, ".:", err)
		return 1
	}
	return m.Run()
}

// needTool finds an external program the test cannot do without. A missing
// one fails the test (CI installs it) unless RINGGATE_E2E_SKIP_MISSING=1.
func needTool(t *testing.T, name string, fallbacks ...string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, p := range fallbacks {
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	msg := fmt.Sprintf("%s not found on PATH nor at %v: install it (Debian: apt-get install %s; .ci/run does) "+
		"or set RINGGATE_E2E_SKIP_MISSING=1 to skip this test", name, fallbacks, name)
	if os.Getenv("RINGGATE_E2E_SKIP_MISSING") == "1" {
		t.Skip(msg)
	}
	t.Fatal(msg)
	return ""
}
