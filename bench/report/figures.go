package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ringgate/ringgate/internal/benchout"
)

// The figures phase runs the project's benchmarks and report tests as
// child go test processes, as make bench and make report do, so that every
// figure the README shows comes from this one run.

// benchSets are the go test -bench runs: what each measures, and its
// arguments after "go test".
var benchSets = []struct {
	what string
	args []string
}{
	{"hot paths: the decision, the ring, estimates, snapshots, parsing, a node's state",
		[]string{"-run", "^$", "-bench", ".", "-benchmem", "./limiter/", "./reserve/", "./ring/", "./snapshot/", "./upstream/", "./router/"}},
	{"the decision against Redis per request; a new owner's handoff from Redis",
		[]string{"-run", "^$", "-bench", "DecisionVsRedis|HandoffTake", "-benchmem", "-benchtime", "2000x", "./node/"}},
	{"a standalone node configured with 100 000 tenants",
		[]string{"-run", "^$", "-bench", "ManyTenants", "-benchtime", "1x", "./node/"}},
}

// reportTests are the tests that measure end to end and save their tables
// and figures with internal/benchout, by the name they save under.
var reportTests = []struct {
	name string
	args []string
}{
	{"added-latency", []string{"-count=1", "-run", "^TestAddedLatencyReport$", "./node/"}},
	{"hop-latency", []string{"-count=1", "-run", "^TestHopLatencyReport$", "./node/"}},
	{"many-tenants-cluster", []string{"-count=1", "-tags", "e2e", "-run", "^TestManyTenantsClusterReport$", "./e2e/"}},
	{"fair-share", []string{"-count=1", "-run", "^TestFairShareReport$", "./node/"}},
}

// benchResult is one line of go test -bench output.
type benchResult struct {
	name    string // without the -GOMAXPROCS suffix
	units   []string
	metrics map[string]float64 // by unit
}

// figures is what the phase gathered.
type figures struct {
	benches map[string]benchResult // by name
	order   []string               // names as printed
	pkgOf   map[string]string      // the package each benchmark ran in
	tests   map[string]benchout.Figures
	tables  map[string]string // each report test's markdown
}

var (
	// benchLine is a result: name, -GOMAXPROCS, iterations, figures.
	benchLine = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+(\d+)\s+(\d.*)$`)
	// benchName is a result line cut short by what the benchmark wrote
	// while it ran; figuresLine is the rest of it, printed after that.
	benchName   = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?(\s|$)`)
	figuresLine = regexp.MustCompile(`^\s*(\d+)\s+(\d.*ns/op.*)$`)
)

// parseBench reads go test -bench output into results. A benchmark name
// seen in two packages is an error: which one a figure means would be a
// guess.
func parseBench(out []byte, f *figures) error {
	if f.pkgOf == nil {
		f.pkgOf = map[string]string{}
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	pkg, pending := "", ""
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = p
			continue
		}
		var name, figs string
		if m := benchLine.FindStringSubmatch(line); m != nil {
			name, figs = m[1], m[4]
		} else if m := figuresLine.FindStringSubmatch(line); m != nil && pending != "" {
			name, figs = pending, m[2]
		} else if m := benchName.FindStringSubmatch(line); m != nil {
			pending = m[1]
			continue
		} else {
			continue
		}
		pending = ""
		r := benchResult{name: name, metrics: map[string]float64{}}
		fields := strings.Fields(figs)
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				break
			}
			r.units = append(r.units, fields[i+1])
			r.metrics[fields[i+1]] = v
		}
		if other, seen := f.pkgOf[name]; seen && other != pkg {
			return fmt.Errorf("benchmark %s ran in %s and in %s", name, other, pkg)
		} else if !seen {
			f.order = append(f.order, name)
		}
		f.pkgOf[name] = pkg
		f.benches[name] = r
	}
	return sc.Err()
}

// runFigures runs benchSets and reportTests in turn and gathers their
// results; any failure stops the report (a figure missing is not shown as
// a number).
func runFigures() (*figures, error) {
	f := &figures{benches: map[string]benchResult{}, tests: map[string]benchout.Figures{}, tables: map[string]string{}}
	for _, s := range benchSets {
		fmt.Fprintf(os.Stderr, "report: go test %s\n", strings.Join(s.args, " "))
		out, err := goTest(s.args, nil)
		if err != nil {
			return nil, fmt.Errorf("benchmarks (%s): %w", s.what, err)
		}
		if err := parseBench(out, f); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "ringgate-report-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	for _, t := range reportTests {
		fmt.Fprintf(os.Stderr, "report: go test %s\n", strings.Join(t.args, " "))
		if _, err := goTest(t.args, []string{"RINGGATE_BENCH_REPORT=1", benchout.EnvDir + "=" + dir}); err != nil {
			return nil, fmt.Errorf("report test %s: %w", t.name, err)
		}
		md, figs, err := benchout.Load(dir, t.name)
		if err != nil {
			return nil, fmt.Errorf("report test %s: %w", t.name, err)
		}
		f.tests[t.name], f.tables[t.name] = figs, md
	}
	return f, nil
}

// goTest runs go test with args (and env added) in the working directory,
// the module's root when run as make bench-report does, and returns its
// output; a failing test is an error with the output's tail.
func goTest(args, env []string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append([]string{"test"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		tail := out[max(0, len(out)-2000):]
		return nil, fmt.Errorf("go test %s: %w\n%s", strings.Join(args, " "), err, tail)
	}
	return out, nil
}

// bench returns benchmark name's metric in unit, or an error naming it.
func (f *figures) bench(name, unit string) (float64, error) {
	r, ok := f.benches[name]
	if !ok {
		return 0, fmt.Errorf("benchmark %s did not run", name)
	}
	v, ok := r.metrics[unit]
	if !ok {
		return 0, fmt.Errorf("benchmark %s reported no %s", name, unit)
	}
	return v, nil
}

// test returns report test name's figure key, or an error naming it.
func (f *figures) test(name, key string) (float64, error) {
	v, ok := f.tests[name][key]
	if !ok {
		return 0, fmt.Errorf("report test %s saved no %s", name, key)
	}
	return v, nil
}

// benchTable is every benchmark line as a markdown table.
func (f *figures) benchTable() string {
	var b strings.Builder
	b.WriteString("| benchmark | figures |\n| --- | --- |\n")
	for _, name := range f.order {
		r := f.benches[name]
		var parts []string
		for _, u := range r.units {
			parts = append(parts, strconv.FormatFloat(r.metrics[u], 'f', -1, 64)+" "+u)
		}
		fmt.Fprintf(&b, "| `%s` | %s |\n", strings.TrimPrefix(name, "Benchmark"), strings.Join(parts, ", "))
	}
	return b.String()
}
