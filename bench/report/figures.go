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
	raw     []string               // the benchmark lines, for the report
	tests   map[string]benchout.Figures
	tables  map[string]string // each report test's markdown
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+(\d+)\s+(.+)$`)

// parseBench reads go test -bench output into results.
func parseBench(out []byte, f *figures) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		r := benchResult{name: m[1], metrics: map[string]float64{}}
		fields := strings.Fields(m[4])
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				break
			}
			r.units = append(r.units, fields[i+1])
			r.metrics[fields[i+1]] = v
		}
		if _, seen := f.benches[r.name]; !seen {
			f.order = append(f.order, r.name)
		}
		f.benches[r.name] = r
		f.raw = append(f.raw, sc.Text())
	}
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
		parseBench(out, f)
	}
	dir, err := os.MkdirTemp("", "ringgate-report-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
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

// goTest runs go test with args (and env added) from the module's root and
// returns its output; a failing test is an error with the output's tail.
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
