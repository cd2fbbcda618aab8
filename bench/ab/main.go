// Command ab compares the saturated throughput of two builds of ringgate,
// each against the floor (bench/floor) in the same rounds: the working
// tree's and a git revision's. One run of the saturation benchmark moves
// with the machine by more than a change to the request path does (0.84
// to 0.92 of the floor's throughput on the same code); runs of the two
// builds alternated, and the medians of many rounds, share the machine's
// moments.
//
//	go run ./bench/ab -base HEAD~3 -clients 64 -reps 4
//
// It builds node's test binary in the working tree and in a temporary git
// worktree at base (with the working tree's node/probe_test.go there when
// base has none), runs TestSaturationProbe with each in
// turn reps times (8 rounds of 20 000 requests to the floor and to ringgate
// per run), and prints each build's median ratio of ringgate's throughput
// to the floor's and of its CPU over the floor's per request. It only
// talks to 127.0.0.1, and every process it starts ends with its run.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

func main() {
	base := flag.String("base", "HEAD", "git revision to compare the working tree with")
	clients := flag.Int("clients", 8, "concurrent clients (64 saturate 2 cores)")
	reps := flag.Int("reps", 4, "runs of each build, alternated (8 rounds each)")
	flag.Parse()
	// Interrupted, the probe running is killed and the deferred clean-up
	// (the worktree, the temporary directory) still runs.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *base, *clients, *reps)
	stop()
	if err != nil {
		log.Fatalf("ab: %v", err)
	}
}

func run(ctx context.Context, base string, clients, reps int) error {
	if clients <= 0 || reps <= 0 {
		return fmt.Errorf("-clients and -reps must be > 0")
	}
	root, err := output(ctx, "", "git", "rev-parse", "--show-toplevel")
	if err != nil {
		return fmt.Errorf("not in a git work tree: %w", err)
	}
	root = strings.TrimSpace(root)
	tmp, err := os.MkdirTemp("", "ringgate-ab-")
	if err != nil {
		return err
	}
	defer func() {
		if err := os.RemoveAll(tmp); err != nil {
			log.Printf("ab: remove %s: %v", tmp, err)
		}
	}()

	head := filepath.Join(tmp, "head.test")
	if err := build(ctx, root, head); err != nil {
		return fmt.Errorf("build the working tree: %w", err)
	}
	baseBin, err := buildAt(ctx, root, tmp, base)
	if err != nil {
		return fmt.Errorf("build %s: %w", base, err)
	}

	builds := []struct{ name, bin string }{{base, baseBin}, {"working tree", head}}
	rounds := make([][]round, len(builds))
	for rep := range reps {
		// ABBA: neither build always runs first.
		order := []int{0, 1}
		if rep%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			b := builds[i]
			got, err := probe(ctx, root, b.bin, clients)
			if err != nil {
				return fmt.Errorf("run %d of %s: %w", rep+1, b.name, err)
			}
			rounds[i] = append(rounds[i], got...)
			fmt.Fprintf(os.Stderr, "run %d of %s: %d rounds\n", rep+1, b.name, len(got))
		}
	}
	fmt.Printf("%d clients, %d rounds of each build, alternated run by run\n\n", clients, len(rounds[0]))
	fmt.Printf("| build | ringgate / floor throughput | range | CPU µs a request over the floor's |\n| --- | ---: | --- | ---: |\n")
	for i, b := range builds {
		var ratio, cpu []float64
		for _, r := range rounds[i] {
			ratio = append(ratio, r.ringgateRPS/r.floorRPS)
			cpu = append(cpu, r.ringgateCPU-r.floorCPU)
		}
		fmt.Printf("| %s | %.3f | %.3f–%.3f | %.2f |\n", b.name, median(ratio), slices.Min(ratio), slices.Max(ratio), median(cpu))
	}
	return nil
}

// probeRounds is how many rounds a run of TestSaturationProbe prints.
const probeRounds = 8

// round is one line of TestSaturationProbe.
type round struct {
	floorRPS, ringgateRPS, floorCPU, ringgateCPU float64
}

// probe runs TestSaturationProbe with the test binary bin and reads its
// rounds.
func probe(ctx context.Context, root, bin string, clients int) ([]round, error) {
	cmd := exec.CommandContext(ctx, bin, "-test.run", "^TestSaturationProbe$", "-test.count", "1", "-test.timeout", "20m")
	cmd.Dir = filepath.Join(root, "node")
	cmd.Env = append(os.Environ(), fmt.Sprintf("RINGGATE_SATURATION_PROBE=%d", clients))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, tail(out))
	}
	var rounds []round
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r round
		var c, n int
		if _, err := fmt.Sscanf(sc.Text(), "probe clients=%d round=%d floor_rps=%g ringgate_rps=%g floor_cpu_us=%g ringgate_cpu_us=%g",
			&c, &n, &r.floorRPS, &r.ringgateRPS, &r.floorCPU, &r.ringgateCPU); err == nil && r.floorRPS > 0 {
			rounds = append(rounds, r)
		}
	}
	if len(rounds) != probeRounds {
		return nil, fmt.Errorf("%d probe rounds in its output, want %d: %s", len(rounds), probeRounds, tail(out))
	}
	return rounds, nil
}

// build compiles node's test binary in dir to bin.
func build(ctx context.Context, dir, bin string) error {
	_, err := output(ctx, dir, "go", "test", "-c", "-o", bin, "./node/")
	return err
}

// buildAt builds node's test binary at git revision rev, in a worktree
// under tmp that is removed after, and returns the binary's path.
func buildAt(ctx context.Context, root, tmp, rev string) (string, error) {
	wt := filepath.Join(tmp, "base")
	if _, err := output(ctx, root, "git", "worktree", "add", "--detach", wt, rev); err != nil {
		return "", err
	}
	defer func() {
		// Not under ctx: removed also when interrupted.
		if _, err := output(context.Background(), root, "git", "worktree", "remove", "--force", wt); err != nil {
			log.Printf("ab: remove the worktree %s: %v", wt, err)
		}
	}()
	probeFile := filepath.Join(wt, "node", "probe_test.go")
	if _, err := os.Stat(probeFile); err != nil {
		mine, err := os.ReadFile(filepath.Join(root, "node", "probe_test.go"))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(probeFile, mine, 0o644); err != nil {
			return "", err
		}
	}
	bin := filepath.Join(tmp, "base.test")
	return bin, build(ctx, wt, bin)
}

func output(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, tail(out))
	}
	return string(out), nil
}

// tail is the end of a command's output, for an error.
func tail(out []byte) string {
	const keep = 2000
	if len(out) > keep {
		out = out[len(out)-keep:]
	}
	return string(out)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
