package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseBench(t *testing.T) {
	out := `goos: linux
BenchmarkDecision-2            	 1000000	        93.5 ns/op	       0 B/op	       0 allocs/op
BenchmarkEstimate/1k/ratio-2  	  300000	      414 ns/op	       942.0 exact	       948.0 tokens	       0 B/op	       0 allocs/op
BenchmarkDecisionVsRedis/redis-incr-per-request-2 	2000	     71000 ns/op
BenchmarkHandoffTake/tenants=100-2 	2000	    860000 ns/op	         8.6 µs/tenant
BenchmarkOwner 	100	     7.6 ns/op
--- FAIL: BenchmarkBroken-2
ok  	github.com/ringgate/ringgate/limiter	1.2s
`
	f := &figures{benches: map[string]benchResult{}}
	if err := parseBench([]byte(out), f); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, unit string
		want       float64
	}{
		{"BenchmarkDecision", "ns/op", 93.5},
		{"BenchmarkDecision", "allocs/op", 0},
		{"BenchmarkEstimate/1k/ratio", "tokens", 948},
		{"BenchmarkDecisionVsRedis/redis-incr-per-request", "ns/op", 71000},
		{"BenchmarkHandoffTake/tenants=100", "µs/tenant", 8.6},
		{"BenchmarkOwner", "ns/op", 7.6},
	} {
		got, err := f.bench(c.name, c.unit)
		if err != nil || got != c.want {
			t.Errorf("%s %s = %v, %v; want %v", c.name, c.unit, got, err, c.want)
		}
	}
	if _, err := f.bench("BenchmarkBroken", "ns/op"); err == nil {
		t.Error("a failed benchmark has a figure")
	}
	if len(f.order) != 5 {
		t.Errorf("order %v, want the 5 benchmarks as printed", f.order)
	}
}

// A benchmark that writes while it runs splits its result line: the name,
// its output, then the figures.
func TestParseBenchSplitLine(t *testing.T) {
	out := "BenchmarkManyTenants-2   \t" + `{"level":"INFO","msg":"start"}` + "\n" +
		`{"level":"INFO","msg":"more"}` + "\n" +
		"       1\t1881518397 ns/op\t      1048 ready-ms\n"
	f := &figures{benches: map[string]benchResult{}}
	if err := parseBench([]byte(out), f); err != nil {
		t.Fatal(err)
	}
	if v, err := f.bench("BenchmarkManyTenants", "ready-ms"); err != nil || v != 1048 {
		t.Fatalf("ready-ms = %v, %v; want 1048", v, err)
	}
}

// The same benchmark name in two packages stops the report.
func TestParseBenchSameNameTwoPackages(t *testing.T) {
	out := "pkg: github.com/ringgate/ringgate/limiter\nBenchmarkDecision-2 \t 1000\t 81 ns/op\n" +
		"pkg: github.com/ringgate/ringgate/router\nBenchmarkDecision-2 \t 1000\t 334 ns/op\n"
	f := &figures{benches: map[string]benchResult{}}
	if err := parseBench([]byte(out), f); err == nil {
		t.Fatal("a name in two packages was taken")
	}
}

// TestFigureRowsNameMissing: a figure the run did not produce stops the
// report, naming it, instead of printing a zero.
func TestFigureRowsNameMissing(t *testing.T) {
	_, err := figureRows(&figures{benches: map[string]benchResult{}})
	if err == nil || !strings.Contains(err.Error(), "did not run") {
		t.Fatalf("err = %v, want a missing benchmark named", err)
	}
}

func TestSpliceReadme(t *testing.T) {
	path := filepath.Join(t.TempDir(), "README.md")
	before := "# x\n\n## Figures\n\n" + readmeBegin + "\nold figures\n" + readmeEnd + "\n\n## After\n"
	if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	block := readmeBlock("head\n", "| lat |\n", "acc\n")
	for range 2 { // again: the markers are kept
		if err := spliceReadme(path, block); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := os.ReadFile(path)
	want := "# x\n\n## Figures\n\n" + block + "\n\n## After\n"
	if string(got) != want {
		t.Fatalf("README:\n%s\nwant:\n%s", got, want)
	}
	if err := os.WriteFile(path, []byte("# no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := spliceReadme(path, block); err == nil {
		t.Fatal("a README without markers was written")
	}
}

// TestReadmeHasMarkers: the repository's README has the block make
// bench-report writes.
func TestReadmeHasMarkers(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	i, j := strings.Index(string(b), readmeBegin), strings.Index(string(b), readmeEnd)
	if i < 0 || j < i {
		t.Fatal("README.md has no bench-report block")
	}
}
