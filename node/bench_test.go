package node

// End-to-end latency and throughput of a request sent straight to the fake
// provider ("direct"), through a bare fasthttp reverse proxy in front of it
// ("floor", bench/floor: the cost of one more HTTP hop, which no gateway
// avoids) and through a standalone ringgate node in front of it
// ("ringgate"), measured in the same process and run, on loopback only:
//
//	go test -run XXX -bench Proxy -benchtime 2000x ./node/
//	RINGGATE_BENCH_REPORT=1 go test -run TestAddedLatencyReport -v ./node/
//
// The client, the node and the fake provider share the machine's cores, so
// the figures are for comparing the two paths against each other, not
// absolute numbers.

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/bench/floor"
	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/internal/benchout"
	"github.com/ringgate/ringgate/internal/benchsetup"
	"github.com/ringgate/ringgate/internal/procstat"
)

const (
	benchKey        = benchsetup.Key
	benchTenant     = benchsetup.Tenant
	benchBody       = benchsetup.Body
	benchStreamBody = benchsetup.StreamBody

	// benchReqTimeout bounds every single request (client read and write).
	benchReqTimeout = 10 * time.Second
	// benchMaxLoop bounds every load loop in wall-clock time, on top of its
	// bound in count.
	benchMaxLoop = 3 * time.Minute
	// benchMaxSamples caps the per-request durations kept by one
	// sequential benchmark run (memory bound for huge -benchtime).
	benchMaxSamples = 1 << 20
	// benchWarmup requests go to each target before measuring: they open
	// the keep-alive connections and load the tokenizer's encoding.
	benchWarmup = 100
	// benchParallelism is the RunParallel multiplier: GOMAXPROCS ×
	// benchParallelism concurrent clients.
	benchParallelism = 4
)

// benchEnv is a fake provider, a standalone ringgate node in front of it,
// and a keep-alive client for each.
type benchEnv struct {
	fake   *fakeupstream.Server
	node   *Node
	direct *fasthttp.HostClient // client → fake
	floor  *fasthttp.HostClient // client → bare proxy → fake
	via    *fasthttp.HostClient // client → node → fake
}

// target is one path a request can take.
type target struct {
	name string
	hc   *fasthttp.HostClient
	body string
	// stream: the answer must be an SSE stream ending in [DONE].
	stream bool
	// node, if set, is the node that must have enforced the request (its
	// x-ringgate-node answer header): a forwarded request that fell back
	// to the local share would otherwise be timed as a hop.
	node string
}

// targets are direct, floor and ringgate, in that order.
func (e *benchEnv) targets(stream bool) []target {
	body := benchBody
	if stream {
		body = benchStreamBody
	}
	return []target{
		{name: "direct", hc: e.direct, body: body, stream: stream},
		{name: "floor", hc: e.floor, body: body, stream: stream},
		{name: "ringgate", hc: e.via, body: body, stream: stream},
	}
}

// newBenchEnv starts the fake provider and the node; both stop when tb ends.
func newBenchEnv(tb testing.TB) *benchEnv {
	tb.Helper()
	fake, upAddr := startBenchFake(tb)
	cfg := benchConfig("bench-1", upAddr)
	n, err := Start(cfg, benchOptions())
	if err != nil {
		tb.Fatalf("start node: %v", err)
	}
	tb.Cleanup(func() { _ = n.Close() })
	fl, err := floor.Start("127.0.0.1:0", upAddr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = fl.Close() })
	return &benchEnv{fake: fake, node: n, direct: benchClient(upAddr), floor: benchClient(fl.Addr()), via: benchClient(n.Addr())}
}

// startBenchFake starts a zero-latency fake provider that stops when tb ends.
func startBenchFake(tb testing.TB) (*fakeupstream.Server, string) { return benchsetup.Fake(tb) }

// benchConfig is a standalone node's config in front of the fake at upAddr.
func benchConfig(name, upAddr string) *config.Config { return benchsetup.Config(name, upAddr) }

func benchOptions() Options {
	return Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func benchClient(addr string) *fasthttp.HostClient {
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		panic("benchmarks only talk to 127.0.0.1, not " + addr)
	}
	return &fasthttp.HostClient{
		Addr:                     addr,
		MaxConns:                 1024,
		MaxConnWaitTimeout:       benchReqTimeout,
		ReadTimeout:              benchReqTimeout,
		WriteTimeout:             benchReqTimeout,
		MaxIdleConnDuration:      time.Minute,
		NoDefaultUserAgentHeader: true,
	}
}

// client is one sequential client of a target: its request is built once
// and reused, like a real keep-alive client's.
type client struct {
	t    target
	req  *fasthttp.Request
	resp *fasthttp.Response
}

func newClient(t target) *client {
	req := fasthttp.AcquireRequest()
	req.SetRequestURI("http://" + t.hc.Addr + "/v1/chat/completions")
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("Authorization", "Bearer "+benchKey)
	req.SetBodyString(t.body)
	return &client{t: t, req: req, resp: fasthttp.AcquireResponse()}
}

func (c *client) release() {
	fasthttp.ReleaseRequest(c.req)
	fasthttp.ReleaseResponse(c.resp)
}

var sseDone = []byte("data: [DONE]")

// do sends one request and reads the whole answer (the client is not
// streaming: a stream is read to its end). It checks the answer, not its
// timing.
func (c *client) do() error {
	if err := c.t.hc.Do(c.req, c.resp); err != nil {
		return fmt.Errorf("%s: %w", c.t.name, err)
	}
	body := c.resp.Body()
	if c.resp.StatusCode() != fasthttp.StatusOK {
		return fmt.Errorf("%s: status %d: %.300s", c.t.name, c.resp.StatusCode(), body)
	}
	if c.t.stream {
		if !bytes.Contains(body, sseDone) {
			return fmt.Errorf("%s: stream without [DONE]: %.300s", c.t.name, body)
		}
	} else if !bytes.Contains(body, []byte(`"chat.completion"`)) {
		return fmt.Errorf("%s: not a chat completion: %.300s", c.t.name, body)
	}
	if c.t.node != "" {
		if got := c.resp.Header.Peek("x-ringgate-node"); string(got) != c.t.node {
			return fmt.Errorf("%s: served by %q, want the owner %q", c.t.name, got, c.t.node)
		}
	}
	return nil
}

// timed is do with its wall-clock duration.
func (c *client) timed() (time.Duration, error) {
	start := time.Now()
	err := c.do()
	return time.Since(start), err
}

func (c *client) warm(tb testing.TB) {
	tb.Helper()
	for range benchWarmup {
		if err := c.do(); err != nil {
			tb.Fatalf("warm-up: %v", err)
		}
	}
}

// percentile is the nearest-rank q-quantile of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// median is the middle of xs (the mean of the two middle ones for an even
// count); xs is left as it was.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// BenchmarkProxy measures sequential request latency (one request at a
// time, keep-alive) straight to the fake provider and through ringgate.
func BenchmarkProxy(b *testing.B) {
	env := newBenchEnv(b)
	eachTarget(b, env.targets, benchLatency)
}

// eachTarget runs bench as a sub-benchmark for each target, JSON then
// stream ("-stream" names).
func eachTarget(b *testing.B, targets func(stream bool) []target, bench func(*testing.B, target)) {
	for _, stream := range []bool{false, true} {
		for _, t := range targets(stream) {
			name := t.name
			if stream {
				name += "-stream"
			}
			b.Run(name, func(b *testing.B) { bench(b, t) })
		}
	}
}

func benchLatency(b *testing.B, t target) {
	c := newClient(t)
	defer c.release()
	c.warm(b)
	durs := make([]time.Duration, 0, min(b.N, benchMaxSamples))
	deadline := time.Now().Add(benchMaxLoop)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, err := c.timed()
		if err != nil {
			b.Fatal(err)
		}
		if len(durs) < cap(durs) {
			durs = append(durs, d)
		}
		if i%256 == 255 && time.Now().After(deadline) {
			b.Fatalf("%d requests took over %s", i+1, benchMaxLoop)
		}
	}
	b.StopTimer()
	slices.Sort(durs)
	b.ReportMetric(micros(percentile(durs, 0.50)), "p50-µs")
	b.ReportMetric(micros(percentile(durs, 0.99)), "p99-µs")
}

// BenchmarkProxyParallel measures throughput with GOMAXPROCS ×
// benchParallelism concurrent keep-alive clients.
func BenchmarkProxyParallel(b *testing.B) {
	env := newBenchEnv(b)
	eachTarget(b, env.targets, func(b *testing.B, t target) {
		newClient(t).warmAndRelease(b)
		b.SetParallelism(benchParallelism)
		var failed atomic.Pointer[error]
		deadline := time.Now().Add(benchMaxLoop)
		cpu0 := procstat.CPU()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			c := newClient(t)
			defer c.release()
			for i := 0; pb.Next(); i++ {
				if err := c.do(); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				if i%256 == 255 && time.Now().After(deadline) {
					err := fmt.Errorf("parallel load ran over %s", benchMaxLoop)
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
		b.StopTimer()
		if err := failed.Load(); err != nil {
			b.Fatal(*err)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		// CPU per request, the client and the fake provider included (the
		// same for every target): at saturation throughput follows it,
		// and it swings less than throughput does from run to run.
		b.ReportMetric(micros(procstat.CPU()-cpu0)/float64(b.N), "cpu-µs/op")
	})
}

func (c *client) warmAndRelease(tb testing.TB) {
	tb.Helper()
	defer c.release()
	c.warm(tb)
}

// TestAddedLatencyReport prints what ringgate adds to a request's latency
// and takes from throughput, against going direct and against the floor (a
// bare fasthttp reverse proxy), all three measured in the same run,
// interleaved: sequential requests, an open loop at a fixed rate, and
// saturation. It only reports: timing never fails it (only a wrong answer
// does). Run it with RINGGATE_BENCH_REPORT=1 and -v.
func TestAddedLatencyReport(t *testing.T) {
	if os.Getenv("RINGGATE_BENCH_REPORT") != "1" {
		t.Skip("set RINGGATE_BENCH_REPORT=1 to run the latency report")
	}
	const (
		perTarget     = 3000  // sequential requests per target and workload
		block         = 100   // interleaving block
		rate          = 2000  // open loop: requests a second
		perRound      = 2000  // open loop: requests per target and round
		parallelTotal = 20000 // requests per target in a throughput round
		rounds        = 7     // open-loop rounds per target, interleaved
		satRounds     = 21    // throughput rounds per target, interleaved
	)
	env := newBenchEnv(t)
	var out strings.Builder
	figs := benchout.Figures{"open_rate": rate, "rounds": rounds, "sat_rounds": satRounds}
	header := func(title string, args ...any) {
		fmt.Fprintf(&out, "\n"+title+"\n\n", args...)
		fmt.Fprintf(&out, "| workload | pct | direct µs | floor µs | ringgate µs | ringgate − floor µs | ringgate / floor |\n")
		fmt.Fprintf(&out, "| --- | --- | ---: | ---: | ---: | ---: | ---: |\n")
	}
	header("sequential latency, %d requests per target, interleaved in blocks of %d, GOMAXPROCS=%d",
		perTarget, block, runtime.GOMAXPROCS(0))
	for _, stream := range []bool{false, true} {
		latencyRows3(&out, figs, stream, interleaveAll(t, env.targets(stream), perTarget, block))
	}

	// The open loop and saturation run in rounds, each target in turn (its
	// place rotating), and the tables give the median round: a hiccup of
	// this shared VM (a stall of a few ms, seen in one round of one target,
	// direct included) moves one round, not the figure. The ratio is the
	// median of each round's ringgate/floor, two runs taken moments
	// apart, with its range over the rounds.
	fmt.Fprintf(&out, "\nopen loop at %d requests/s (latency from each request's release to the clients: its due time, or later when the generator's sleep overran), %d requests per target in each of %d interleaved rounds; the median round, and the range of ringgate/floor over the rounds\n\n",
		rate, perRound, rounds)
	fmt.Fprintf(&out, "| workload | pct | direct µs | floor µs | ringgate µs | ringgate − floor µs | ringgate / floor | range |\n")
	fmt.Fprintf(&out, "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, stream := range []bool{false, true} {
		ts := env.targets(stream)
		durs := make([][][]time.Duration, rounds) // round, target
		for r := range rounds {
			durs[r] = make([][]time.Duration, len(ts))
			for k := range ts {
				i := (k + r) % len(ts)
				durs[r][i] = openLoop(t, ts[i], rate, perRound)
			}
		}
		for _, q := range []float64{0.50, 0.90, 0.99} {
			per := make([][]float64, len(ts)) // target, round
			ratios := make([]float64, rounds)
			for r := range rounds {
				for i := range ts {
					per[i] = append(per[i], micros(percentile(durs[r][i], q)))
				}
				ratios[r] = per[2][r] / per[1][r]
			}
			d, f, v := median(per[0]), median(per[1]), median(per[2])
			key := fmt.Sprintf("%s_open_p%.0f_", workload(stream), q*100)
			figs[key+"direct_us"], figs[key+"floor_us"], figs[key+"ringgate_us"] = d, f, v
			figs[key+"ratio"], figs[key+"ratio_min"], figs[key+"ratio_max"] = median(ratios), slices.Min(ratios), slices.Max(ratios)
			fmt.Fprintf(&out, "| %s | p%.0f | %.0f | %.0f | %.0f | %+.0f | %.2f | %.2f–%.2f |\n",
				workload(stream), q*100, d, f, v, v-f, median(ratios), slices.Min(ratios), slices.Max(ratios))
		}
	}

	// Saturation with the benchmark's clients (8 on 2 cores, which leave
	// the CPUs partly idle), and for JSON with 8 times as many, which
	// saturate them. The CPU a request takes is the whole process's (the
	// clients' and the fake provider's included, the same for every
	// target); its ratio is taken in each round, floor and ringgate run
	// back to back.
	workers := benchParallelism * runtime.GOMAXPROCS(0)
	fmt.Fprintf(&out, "\nsaturated throughput, %d requests per target and round, %d interleaved rounds; the median round, and the range of ringgate/floor over the rounds; CPU: the test process's (clients and fake provider included) per request, the median round, and the median of each round's ringgate/floor\n\n",
		parallelTotal, satRounds)
	fmt.Fprintf(&out, "| workload | clients | direct req/s | floor req/s | ringgate req/s | ringgate / floor | range | CPU µs a request: floor / ringgate | CPU ringgate / floor |\n")
	fmt.Fprintf(&out, "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |\n")
	for _, run := range []struct {
		stream  bool
		clients int
		key     string
	}{
		{false, workers, "json_sat_"},
		{true, workers, "stream_sat_"},
		{false, 8 * workers, "json_sat_many_"},
	} {
		ts := env.targets(run.stream)
		per := make([][]float64, len(ts)) // target, round
		cpu := make([][]float64, len(ts)) // target, round: µs a request
		ratios, cpuRatios := make([]float64, satRounds), make([]float64, satRounds)
		for r := range satRounds {
			got, used := make([]float64, len(ts)), make([]float64, len(ts))
			for k := range ts {
				i := (k + r) % len(ts)
				cpu0 := procstat.CPU()
				got[i] = throughput(t, ts[i], run.clients, parallelTotal)
				used[i] = micros(procstat.CPU()-cpu0) / parallelTotal
			}
			for i := range ts {
				per[i], cpu[i] = append(per[i], got[i]), append(cpu[i], used[i])
			}
			ratios[r], cpuRatios[r] = got[2]/got[1], used[2]/used[1]
		}
		key := run.key
		figs[key+"clients"] = float64(run.clients)
		figs[key+"direct"], figs[key+"floor"], figs[key+"ringgate"] = median(per[0]), median(per[1]), median(per[2])
		figs[key+"ratio"], figs[key+"ratio_min"], figs[key+"ratio_max"] = median(ratios), slices.Min(ratios), slices.Max(ratios)
		figs[key+"cpu_floor_us"], figs[key+"cpu_ringgate_us"], figs[key+"cpu_ratio"] = median(cpu[1]), median(cpu[2]), median(cpuRatios)
		fmt.Fprintf(&out, "| %s | %d | %.0f | %.0f | %.0f | %.2f | %.2f–%.2f | %.1f / %.1f | %.2f |\n", workload(run.stream), run.clients,
			median(per[0]), median(per[1]), median(per[2]), median(ratios), slices.Min(ratios), slices.Max(ratios),
			median(cpu[1]), median(cpu[2]), median(cpuRatios))
	}
	benchout.Save(t, "added-latency", out.String(), figs)
}

// latencyRows3 writes the p50, p90 and p99 rows comparing direct, floor and
// ringgate (sorted durations, in that order), and puts them in figs.
func latencyRows3(out io.Writer, figs benchout.Figures, stream bool, durs [][]time.Duration) {
	for _, q := range []float64{0.50, 0.90, 0.99} {
		d, f, v := percentile(durs[0], q), percentile(durs[1], q), percentile(durs[2], q)
		key := fmt.Sprintf("%s_seq_p%.0f_", workload(stream), q*100)
		figs[key+"direct_us"], figs[key+"floor_us"], figs[key+"ringgate_us"] = micros(d), micros(f), micros(v)
		fmt.Fprintf(out, "| %s | p%.0f | %.0f | %.0f | %.0f | %+.0f | %.2f |\n",
			workload(stream), q*100, micros(d), micros(f), micros(v), micros(v-f), float64(v)/float64(f))
	}
}

// openLoopWorkers bounds the requests an open loop has in flight.
const openLoopWorkers = 64

// openLoop sends n requests to tg at rate a second, each due at its own
// moment whatever the answers before it took (an open loop: a slow answer
// delays no later request's clock, so queueing shows in the latency instead
// of lowering the load), and returns each request's latency from the moment
// it was released to the workers. That is its due time, or later when the
// scheduler's sleep overran (by up to tens of µs, the same for every
// target), a lateness of the load generator, not of the target.
func openLoop(tb testing.TB, tg target, rate, n int) []time.Duration {
	tb.Helper()
	interval := time.Second / time.Duration(rate)
	due := make(chan time.Time, n)
	durs := make([]time.Duration, n)
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range openLoopWorkers {
		c := newClient(tg)
		wg.Go(func() {
			defer c.release()
			for at := range due {
				if failed.Load() != nil {
					continue
				}
				if err := c.do(); err != nil {
					failed.CompareAndSwap(nil, &err)
					continue
				}
				durs[next.Add(1)-1] = time.Since(at)
			}
		})
	}
	newClient(tg).warmAndRelease(tb)
	start := time.Now()
	deadline := start.Add(benchMaxLoop)
	for i := 0; i < n && failed.Load() == nil; {
		now := time.Now()
		if now.After(deadline) {
			err := fmt.Errorf("open loop ran over %s", benchMaxLoop)
			failed.CompareAndSwap(nil, &err)
			break
		}
		// Send every request due by now, then sleep until the next one.
		for ; i < n; i++ {
			at := start.Add(time.Duration(i) * interval)
			if at.After(now) {
				time.Sleep(at.Sub(now))
				break
			}
			due <- now
		}
	}
	close(due)
	wg.Wait()
	if err := failed.Load(); err != nil {
		tb.Fatal(*err)
	}
	durs = durs[:next.Load()]
	slices.Sort(durs)
	return durs
}

// throughput sends total requests to tg from workers concurrent clients and
// returns the rate achieved.
func throughput(t *testing.T, tg target, workers, total int) float64 {
	t.Helper()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	deadline := time.Now().Add(benchMaxLoop)
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			c := newClient(tg)
			defer c.release()
			for next.Add(1) <= int64(total) && failed.Load() == nil {
				if err := c.do(); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				if time.Now().After(deadline) {
					err := fmt.Errorf("throughput round ran over %s", benchMaxLoop)
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	if err := failed.Load(); err != nil {
		t.Fatal(*err)
	}
	return float64(total) / el.Seconds()
}

// Forwarded (non-owner) requests against owner-local ones: a two-node
// cluster in one process, gossip and HTTP on loopback, one fake provider
// behind both nodes. "local" sends each request to the tenant's owner;
// "forwarded" sends it to the other node, which signs it and hands it to the
// owner (one hop) and relays the answer.
//
//	go test -run XXX -bench Hop -benchtime 2000x ./node/
//	RINGGATE_BENCH_REPORT=1 go test -run TestHopLatencyReport -v ./node/

// fwdConvergeTimeout bounds the wait for both rings to hold both nodes, and
// then for a hop to reach the owner.
const fwdConvergeTimeout = 15 * time.Second

// fwdEnv is the two-node cluster with a keep-alive client for the tenant's
// owner and one for the other node.
type fwdEnv struct {
	fake  *fakeupstream.Server
	nodes []*Node
	owner string
	local *fasthttp.HostClient // client → owner → fake
	fwd   *fasthttp.HostClient // client → other node → owner → fake
}

// targets are the owner-local and forwarded paths; both must be enforced by
// the owner.
func (e *fwdEnv) targets(stream bool) []target {
	local, forwarded := e.pair(stream)
	return []target{local, forwarded}
}

func (e *fwdEnv) pair(stream bool) (local, forwarded target) {
	body := benchBody
	if stream {
		body = benchStreamBody
	}
	return target{name: "local", hc: e.local, body: body, stream: stream, node: e.owner},
		target{name: "forwarded", hc: e.fwd, body: body, stream: stream, node: e.owner}
}

// fwdConfig is one cluster member's configuration: newBenchEnv's node plus
// gossip on a free loopback port and the shared secret.
func fwdConfig(name, upAddr string, secret []byte) *config.Config {
	cfg := benchConfig(name, upAddr)
	cfg.Node.Gossip = "127.0.0.1:0"
	cfg.Cluster.Secret = secret
	cfg.Cluster.ForwardConnectTimeout = 15 * time.Millisecond
	cfg.Cluster.HopSkew = 5 * time.Second
	return cfg
}

// newFwdEnv starts the fake provider and nodes f1 and f2 (f2 joins f1),
// waits until both rings hold both nodes and a forwarded request reaches
// the owner; everything stops when tb ends.
func newFwdEnv(tb testing.TB) *fwdEnv {
	tb.Helper()
	fake, upAddr := startBenchFake(tb)
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		tb.Fatalf("cluster secret: %v", err)
	}
	e := &fwdEnv{fake: fake}
	for i, name := range []string{"f1", "f2"} {
		cfg := fwdConfig(name, upAddr, secret)
		if i > 0 {
			cfg.Node.Join = []string{e.nodes[0].GossipAddr()}
		}
		n, err := Start(cfg, benchOptions())
		if err != nil {
			tb.Fatalf("start node %s: %v", name, err)
		}
		tb.Cleanup(func() { _ = n.Close() })
		e.nodes = append(e.nodes, n)
	}

	deadline := time.Now().Add(fwdConvergeTimeout)
	for !fwdConverged(e.nodes) {
		if time.Now().After(deadline) {
			tb.Fatalf("rings did not reach 2 members within %s: %s", fwdConvergeTimeout, fwdRings(e.nodes))
		}
		time.Sleep(10 * time.Millisecond)
	}
	var ownerNode, otherNode *Node
	for _, n := range e.nodes {
		o, ok := n.Ring().Owner(benchTenant)
		if !ok || (e.owner != "" && o != e.owner) {
			tb.Fatalf("nodes disagree on the owner of %q: %s", benchTenant, fwdRings(e.nodes))
		}
		e.owner = o
	}
	for _, n := range e.nodes {
		if n.Name() == e.owner {
			ownerNode = n
		} else {
			otherNode = n
		}
	}
	if ownerNode == nil || otherNode == nil {
		tb.Fatalf("owner %q is not one of the two nodes", e.owner)
	}
	e.local, e.fwd = benchClient(ownerNode.Addr()), benchClient(otherNode.Addr())

	// The router's view (the members' HTTP addresses) is published next to
	// the ring, not with it: wait until a hop really reaches the owner.
	_, ft := e.pair(false)
	c := newClient(ft)
	defer c.release()
	for {
		err := c.do()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("no forwarded request reached the owner within %s: %v", fwdConvergeTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return e
}

func fwdConverged(nodes []*Node) bool {
	for _, n := range nodes {
		if r := n.Ring(); r == nil || r.Len() != len(nodes) {
			return false
		}
	}
	return true
}

func fwdRings(nodes []*Node) string {
	var s []string
	for _, n := range nodes {
		if r := n.Ring(); r != nil {
			s = append(s, fmt.Sprintf("%s: v%d %v", n.Name(), r.Version(), r.Members()))
		} else {
			s = append(s, n.Name()+": no ring")
		}
	}
	return strings.Join(s, "; ")
}

// BenchmarkHop measures sequential request latency (one request at a time,
// keep-alive) sent to the tenant's owner and sent to the other node, which
// forwards it to the owner.
func BenchmarkHop(b *testing.B) {
	env := newFwdEnv(b)
	eachTarget(b, env.targets, benchLatency)
}

// interleave sends perTarget sequential requests to each of a and b,
// alternating blocks of block requests and which target goes first, and
// returns the sorted durations of each.
func interleave(tb testing.TB, a, b target, perTarget, block int) (ad, bd []time.Duration) {
	tb.Helper()
	durs := interleaveAll(tb, []target{a, b}, perTarget, block)
	return durs[0], durs[1]
}

// interleaveAll sends perTarget sequential requests to each target, in
// blocks of block requests, rotating which target goes first, and returns
// the sorted durations of each.
func interleaveAll(tb testing.TB, ts []target, perTarget, block int) [][]time.Duration {
	tb.Helper()
	cs := make([]*client, len(ts))
	durs := make([][]time.Duration, len(ts))
	for i, t := range ts {
		cs[i] = newClient(t)
		defer cs[i].release()
		cs[i].warm(tb)
		durs[i] = make([]time.Duration, 0, perTarget)
	}
	deadline := time.Now().Add(benchMaxLoop)
	for b := 0; b < perTarget/block; b++ {
		if time.Now().After(deadline) {
			tb.Fatalf("sequential load ran over %s", benchMaxLoop)
		}
		for k := range cs {
			i := (k + b) % len(cs)
			for range block {
				el, err := cs[i].timed()
				if err != nil {
					tb.Fatal(err)
				}
				durs[i] = append(durs[i], el)
			}
		}
	}
	for _, d := range durs {
		slices.Sort(d)
	}
	return durs
}

// latencyRows writes the p50, p90 and p99 rows of a markdown table that
// compares the sorted durations of a baseline and of another path, and
// puts them in figs.
func latencyRows(out io.Writer, figs benchout.Figures, stream bool, base, other []time.Duration) {
	for _, q := range []float64{0.50, 0.90, 0.99} {
		pb, po := percentile(base, q), percentile(other, q)
		key := fmt.Sprintf("%s_p%.0f_", workload(stream), q*100)
		figs[key+"local_us"], figs[key+"forwarded_us"] = micros(pb), micros(po)
		fmt.Fprintf(out, "| %s | p%.0f | %.0f | %.0f | %+.0f | %.2f |\n",
			workload(stream), q*100, micros(pb), micros(po), micros(po-pb), float64(po)/float64(pb))
	}
}

func workload(stream bool) string {
	if stream {
		return "stream"
	}
	return "json"
}

// TestHopLatencyReport prints what a hop adds to a request's latency: the
// same request sent to the tenant's owner and to the other node, in the
// same run, interleaved. Like TestAddedLatencyReport it only reports: timing
// never fails it (only a wrong answer, or one not enforced by the owner,
// does). Run it with RINGGATE_BENCH_REPORT=1 and -v.
func TestHopLatencyReport(t *testing.T) {
	if os.Getenv("RINGGATE_BENCH_REPORT") != "1" {
		t.Skip("set RINGGATE_BENCH_REPORT=1 to run the latency report")
	}
	const (
		perTarget = 3000 // sequential requests per target and workload
		block     = 100  // interleaving block
	)
	env := newFwdEnv(t)
	var out strings.Builder
	figs := benchout.Figures{}
	fmt.Fprintf(&out, "\nowner-local vs forwarded sequential latency, owner %s, %d requests per target, interleaved in blocks of %d, GOMAXPROCS=%d\n\n",
		env.owner, perTarget, block, runtime.GOMAXPROCS(0))
	fmt.Fprintf(&out, "| workload | pct | local µs | forwarded µs | added µs | ratio |\n")
	fmt.Fprintf(&out, "| --- | --- | ---: | ---: | ---: | ---: |\n")
	for _, stream := range []bool{false, true} {
		lt, ft := env.pair(stream)
		ld, fd := interleave(t, lt, ft, perTarget, block)
		latencyRows(&out, figs, stream, ld, fd)
	}
	benchout.Save(t, "hop-latency", out.String(), figs)
}
