// Command report is ringgate's published benchmark (make bench-report):
// on loopback, the same load against
//
//	(a) ringgate: a 3-node cluster, each request sent to any node (the
//	    round robin an L4 load balancer does),
//	(b) one Redis round trip per request: 3 bare proxies, each running the
//	    seed article's atomic Lua sliding window in one Redis,
//	(c) per-node local limits with no coordination: 3 standalone ringgate
//	    nodes, each with the whole limits,
//	(d) the floor: a bare fasthttp reverse proxy (bench/floor),
//	(e) direct to the fake provider,
//
// measuring latency against offered load and saturated throughput for
// all five, and for (a)-(c) accuracy at the provider (the fullest sliding
// window of each tenant against its limit, utilisation, the provider's
// own limit breached) through a scale-up, a drain, a rolling restart and a
// kill -9. It writes
// docs/bench/report.md and two PNG charts, and says which machine and
// command made them.
package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/bench/floor"
	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/internal/audit"
	"github.com/ringgate/ringgate/node"
)

func main() {
	out := flag.String("out", "docs/bench", "directory for report.md and the charts")
	quick := flag.Bool("quick", false, "short phases, no benchmarks, the README left alone: a smoke run, figures not for publishing")
	withFigures := flag.Bool("figures", true, "also run the benchmarks and report tests (go test) whose figures the README shows")
	readme := flag.String("readme", "", "write this run's figures into this README, between its bench-report markers (needs -figures)")
	only := flag.String("accuracy-only", "", "run only the accuracy scenario, for this system (ringgate, redis-per-request, local-limits), and print its figures: to look into one, with RINGGATE_REPORT_LOG")
	flag.Parse()
	if *only != "" {
		if err := accuracyOnly(*only); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*out, *readme, *quick, *withFigures && !*quick); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

// Accuracy scenario: 4 tenants at twice their limit of tenantLimit per
// window; the provider's own limit is above the sum of their limits and
// below what they send.
const (
	window        = 2 * time.Second
	tenantLimit   = 60
	tenants       = 4
	providerLimit = 300
	model         = "gpt-4o-mini"
)

// quiet is the gateways' logger: nothing, or with RINGGATE_REPORT_LOG
// set, JSON lines into that file (to see what a run did).
var quiet = func() *slog.Logger {
	if path := os.Getenv("RINGGATE_REPORT_LOG"); path != "" {
		if f, err := os.Create(path); err == nil {
			return slog.New(slog.NewJSONHandler(f, nil))
		}
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}()

func run(out, readme string, quick, withFigures bool) error {
	if readme != "" && !withFigures {
		return fmt.Errorf("-readme needs the figures phase (-figures, without -quick)")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	fake, upAddr, rds, err := startBackends()
	if err != nil {
		return err
	}
	defer func() { _ = fake.Close(); rds.Stop() }()

	rates := []int{250, 500, 1000, 2000}
	step, satFor, scenario := 2*time.Second, 2*time.Second, accuracyFor
	if quick {
		rates, step, satFor, scenario = []int{250, 1000}, 500*time.Millisecond, 500*time.Millisecond, 14*time.Second
	}
	started := time.Now()

	// Latency and throughput: limits that never bind.
	lat, err := latencyPhase(fake, upAddr, rds.addr, rates, step, satFor)
	if err != nil {
		return err
	}
	// Accuracy through changes, for the three that limit.
	var acc []accuracy
	for _, sys := range []string{"ringgate", "redis-per-request", "local-limits"} {
		fake.SetOptions(providerOptions(true))
		rds.flush()                   // the latency phase's windows
		time.Sleep(window + window/4) // pacing: the provider's window forgets the run before
		fake.Reset()
		a, err := accuracyRun(sys, fake, upAddr, rds.addr, scenario)
		if err != nil {
			return fmt.Errorf("%s: %w", sys, err)
		}
		acc = append(acc, a)
	}
	longest := scenario
	for _, a := range acc {
		longest = max(longest, a.length)
	}
	// The benchmarks and report tests, as child processes: the README's
	// other figures, from this same run.
	var f *figures
	var rows [][2]string
	if withFigures {
		if f, err = runFigures(); err != nil {
			return err
		}
		// Every figure there before anything is written: the charts,
		// the report and the README come from one run or none does.
		if rows, err = figureRows(f); err != nil {
			return err
		}
	}
	if err := drawAccuracy(filepath.Join(out, "accuracy.png"), acc, longest); err != nil {
		return err
	}
	if err := drawLatency(filepath.Join(out, "latency.png"), lat, rates); err != nil {
		return err
	}
	took := time.Since(started)
	if err := writeReport(filepath.Join(out, "report.md"), lat, acc, rates, f, rows, quick, took); err != nil {
		return err
	}
	if readme == "" {
		return nil
	}
	head := madeBy(quick, took) + " Full report: [docs/bench/report.md](docs/bench/report.md).\n\n" +
		"Latency in ms: ringgate on 3 nodes with Redis, a Redis Lua call per request, per-node limits without coordination, a bare fasthttp proxy (the floor), and direct.\n"
	intro := fmt.Sprintf("%d tenants at twice their limit of %d per %v window, through scale-up, drain, rolling restart and kill -9:", tenants, tenantLimit, window)
	return spliceReadme(readme, readmeBlock(head, latencyTable(lat, rates), intro+"\n\n"+accuracyTable(acc)))
}

// accuracyOnly runs the accuracy scenario for sys alone and prints what
// the report would say of it, and t0's window every 250 ms.
func accuracyOnly(sys string) error {
	fake, upAddr, rds, err := startBackends()
	if err != nil {
		return err
	}
	defer func() { _ = fake.Close(); rds.Stop() }()
	fake.SetOptions(providerOptions(true))
	a, err := accuracyRun(sys, fake, upAddr, rds.addr, accuracyFor)
	if err != nil {
		return err
	}
	fmt.Printf("%s: worst %v, utilisation %.2f / %.2f, breaches %d, answers %v, events %v\n", sys, a.worst, a.utilMean, a.utilLow, a.breaches, a.answers, a.events)
	for t := window; t <= a.length; t += 250 * time.Millisecond {
		end := a.start.Add(t)
		fmt.Printf("%5.2fs", t.Seconds())
		for _, ts := range a.arrivals {
			fmt.Printf(" %3d", audit.CountIn(ts, end.Add(-window), end))
		}
		fmt.Println()
	}
	return nil
}

// accuracyFor is the accuracy scenario's length (-quick: shorter).
const accuracyFor = 20 * time.Second

// providerOptions are the fake provider's: its own limit in force for the
// accuracy scenario, none for latency.
func providerOptions(limited bool) fakeupstream.Options {
	o := fakeupstream.Options{CompletionMin: 20, CompletionMax: 20, MaxRecords: 1 << 20}
	if limited {
		o.Limits = fakeupstream.ProviderLimits{Requests: providerLimit, Window: window - window/64}
	}
	return o
}

// startBackends starts the fake provider and a Redis server.
func startBackends() (*fakeupstream.Server, string, *redisServer, error) {
	fake := fakeupstream.New(providerOptions(false))
	upAddr, err := fake.Start("127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	rds, err := startRedis()
	if err != nil {
		_ = fake.Close()
		return nil, "", nil, err
	}
	return fake, upAddr, rds, nil
}

// system is a set of front addresses a load balancer sends to, which the
// scenario's events change.
type system struct {
	mu    sync.Mutex
	addrs []string
}

func (s *system) set(addrs []string) {
	s.mu.Lock()
	s.addrs = slices.Clone(addrs)
	s.mu.Unlock()
}

func (s *system) pick(i int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrs[i%len(s.addrs)]
}

// gateway is one node or proxy of a system under test.
type gateway struct {
	name  string
	addr  string
	node  *node.Node
	proxy *redisLimiter
}

// build makes system sys's gateways: n of them, limits or not.
type builder struct {
	sys, upAddr, redisAddr string
	limits                 bool
	secret                 []byte
	n                      int
	seeds                  []string
}

func (b *builder) config(name string, clustered bool) *config.Config {
	cfg := config.Default()
	cfg.Node.Name = name
	cfg.Node.Listen = "127.0.0.1:0"
	cfg.Node.Gossip = ""
	cfg.Node.DrainTimeout = 5 * time.Second
	cfg.Limits.Window = window
	if clustered {
		cfg.Node.Gossip = "127.0.0.1:0"
		cfg.Node.Join = slices.Clone(b.seeds)
		cfg.Cluster.Secret = b.secret
		cfg.Redis.Addr = b.redisAddr
		cfg.Redis.SnapshotInterval = 200 * time.Millisecond
		cfg.Redis.Timeout = 50 * time.Millisecond
	}
	up := config.Upstream{Name: "fake", Kind: config.KindOpenAI, BaseURL: "http://" + b.upAddr, Models: []string{model},
		Timeout: 10 * time.Second, ConnectTimeout: time.Second, StreamIdleTimeout: 10 * time.Second,
		AnthropicVersion: config.DefaultAnthropicVersion}
	rpm := 1 << 30
	if b.limits {
		up.RPM, rpm = providerLimit, tenantLimit
	}
	cfg.Upstreams = []config.Upstream{up}
	for i := range tenants {
		cfg.Tenants = append(cfg.Tenants, config.Tenant{Name: fmt.Sprintf("t%d", i), Keys: []string{fmt.Sprintf("sk-t%d", i)},
			RPM: rpm, TPM: 1 << 30, Concurrency: 1 << 20, Priority: config.PriorityInteractive})
	}
	return cfg
}

// add starts one more gateway of the system.
func (b *builder) add() (*gateway, error) {
	b.n++
	return b.startNamed(fmt.Sprintf("%s-%d", b.sys, b.n))
}

// restart drains g and starts it again under its name, as a rolling
// restart of a StatefulSet does (a new address, the same name), and waits
// until the new one serves.
func (b *builder) restart(g *gateway) (*gateway, error) {
	g.stop(true)
	ng, err := b.startNamed(g.name)
	if err != nil {
		return nil, err
	}
	return ng, waitReady([]*gateway{ng})
}

// startNamed starts a gateway of the system named name.
func (b *builder) startNamed(name string) (*gateway, error) {
	switch b.sys {
	case "redis-per-request":
		limit := 1 << 30
		if b.limits {
			limit = tenantLimit
		}
		p, err := startRedisLimiter(b.redisAddr, b.upAddr, window, limit)
		if err != nil {
			return nil, err
		}
		return &gateway{name: name, addr: p.Addr(), proxy: p}, nil
	case "floor":
		p, err := floor.Start("127.0.0.1:0", b.upAddr)
		if err != nil {
			return nil, err
		}
		return &gateway{name: name, addr: p.Addr()}, nil
	}
	nd, err := node.Start(b.config(name, b.sys == "ringgate"), node.Options{Logger: quiet})
	if err != nil {
		return nil, err
	}
	if b.sys == "ringgate" {
		b.seeds = append(b.seeds, nd.GossipAddr())
	}
	return &gateway{name: name, addr: nd.Addr(), node: nd}, nil
}

// start makes n gateways and waits until they serve.
func (b *builder) start(n int) ([]*gateway, error) {
	var gs []*gateway
	for range n {
		g, err := b.add()
		if err != nil {
			return nil, err
		}
		gs = append(gs, g)
	}
	return gs, waitReady(gs)
}

func waitReady(gs []*gateway) error {
	deadline := time.Now().Add(15 * time.Second)
	for _, g := range gs {
		for {
			code, _, err := fasthttp.Get(nil, "http://"+g.addr+"/readyz")
			if g.node == nil || (err == nil && code == 200) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not ready", g.addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	time.Sleep(300 * time.Millisecond) // rings agree (gossip's round)
	return nil
}

func (g *gateway) stop(graceful bool) {
	switch {
	case g.proxy != nil:
		g.proxy.Close()
	case g.node != nil && graceful:
		g.node.Drain()
	case g.node != nil:
		_ = g.node.Close()
	}
}

func addrsOf(gs []*gateway) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.addr)
	}
	return out
}

// machine says what ran the report.
func machine() string {
	host, _ := os.Hostname()
	cpu := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d CPUs (GOMAXPROCS %d), %s, %s %s/%s, %s", host, runtime.NumCPU(), runtime.GOMAXPROCS(0), cpu,
		runtime.Version(), runtime.GOOS, runtime.GOARCH, redisVersion())
}
