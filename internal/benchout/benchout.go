// Package benchout hands a report test's results to the bench report
// (bench/report, make bench-report), which runs the test as a child
// process: its markdown tables and its key figures, written as files
// into the directory RINGGATE_BENCH_OUT names. It knows nothing of what
// the figures mean; the report decides which it shows where.
package benchout

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// EnvDir names the directory a report test writes its results into.
const EnvDir = "RINGGATE_BENCH_OUT"

// Figures are a report test's key figures by name: the bench report reads
// them back with Load.
type Figures map[string]float64

// Save logs markdown (as the report tests always did) and, when
// RINGGATE_BENCH_OUT is set, writes it as name.md and figs as name.json
// there.
func Save(tb testing.TB, name, markdown string, figs Figures) {
	tb.Helper()
	tb.Log(markdown)
	dir := os.Getenv(EnvDir)
	if dir == "" {
		return
	}
	b, err := json.Marshal(figs)
	if err != nil {
		tb.Fatalf("benchout %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".md"), []byte(markdown), 0o644); err != nil {
		tb.Fatalf("benchout %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), b, 0o644); err != nil {
		tb.Fatalf("benchout %s: %v", name, err)
	}
}

// Load reads what Save wrote for name in dir.
func Load(dir, name string) (markdown string, figs Figures, err error) {
	md, err := os.ReadFile(filepath.Join(dir, name+".md"))
	if err != nil {
		return "", nil, fmt.Errorf("load %s: %w", name, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, name+".json"))
	if err != nil {
		return "", nil, fmt.Errorf("load %s: %w", name, err)
	}
	if err := json.Unmarshal(b, &figs); err != nil {
		return "", nil, fmt.Errorf("load %s: %w", name, err)
	}
	return string(md), figs, nil
}
