// Package demo runs a self-contained ringgate on loopback for a first look:
// a fake provider, gateway nodes, a few tenants and load through every node,
// then a table of what each tenant got against its limit in every window.
// It needs no Redis and no configuration; it owns nothing the product uses.
package demo

import (
	"context"
	crand "crypto/rand"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/internal/audit"
	"github.com/ringgate/ringgate/node"
	"github.com/ringgate/ringgate/reserve"
)

type demoTenant struct {
	name            string
	rpm, tpm, conc  int
	demandPerWindow int // requests offered per window, spread over all nodes
	stream          bool
}

var tenants = []demoTenant{
	{name: "acme", rpm: 60, tpm: 20000, conc: 8, demandPerWindow: 120},
	{name: "globex", rpm: 30, tpm: 6000, conc: 4, demandPerWindow: 90, stream: true},
	{name: "initech", rpm: 100, tpm: 50000, conc: 16, demandPerWindow: 60},
}

// Run starts the demo and prints to out until it is done or ctx ends.
func Run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(out)
	window := fs.Duration("window", 5*time.Second, "sliding window of the demo's limits")
	windows := fs.Int("windows", 4, "how many windows of load to run")
	verbose := fs.Bool("v", false, "print every node log line")
	redisAddr := fs.String("redis", "", "Redis host:port for handoff snapshots (default: none)")
	queued := fs.Bool("queue", false, "let refused requests wait for room ([queue] defaults) instead of a 429 at once")
	if err := fs.Parse(args); err != nil {
		return err
	}

	out = &lockedWriter{w: out} // node logs and the demo's own lines interleave
	logOut := io.Discard
	if *verbose {
		logOut = out
	}
	logs := &eventLog{w: out, verbose: *verbose}
	logger := slog.New(slog.NewJSONHandler(io.MultiWriter(logOut, logs), nil))

	tok, err := reserve.NewTokenizer()
	if err != nil {
		return err
	}
	fake := fakeupstream.New(fakeupstream.Options{
		Latency: 20 * time.Millisecond, ChunkInterval: 2 * time.Millisecond,
		CompletionMin: 40, CompletionMax: 160, Seed: 1,
		CountTokens: tok.Count,
	})
	upAddr, err := fake.Start("127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("start fake upstream: %w", err)
	}
	defer func() { _ = fake.Close() }()

	secret := make([]byte, 32)
	if _, err := crand.Read(secret); err != nil {
		return err
	}
	base := config.Default()
	base.Node.Listen = "127.0.0.1:0"
	base.Node.Gossip = "127.0.0.1:0"
	base.Node.DrainTimeout = 10 * time.Second
	base.Cluster.Secret = secret
	base.Limits.Window = *window
	if !*queued {
		// The auditor reads the provider's arrival times: queued requests
		// go in the instant room frees, packed at the window's edge, so a
		// loaded machine's delay to the provider (tens of ms) shows as a
		// few requests over in a window, as it would to any auditor at
		// the provider. The demo shows the limits; -queue shows the wait.
		base.Queue.InteractiveWait, base.Queue.BatchWait = 0, 0
	}
	if *redisAddr != "" {
		base.Redis.Addr = *redisAddr
		base.Redis.SnapshotInterval = *window / 10
	}
	base.Upstreams = []config.Upstream{{
		Name: "fake", Kind: config.KindOpenAI, BaseURL: "http://" + upAddr,
		Models: []string{"gpt-4o-mini"}, ConnectTimeout: time.Second, Timeout: 30 * time.Second,
		StreamIdleTimeout: 30 * time.Second, AnthropicVersion: config.DefaultAnthropicVersion,
	}}
	for _, t := range tenants {
		base.Tenants = append(base.Tenants, config.Tenant{
			Name: t.name, Keys: []string{"sk-" + t.name}, RPM: t.rpm, TPM: t.tpm, Concurrency: t.conc,
			Priority: config.PriorityInteractive,
		})
	}
	for i := range warmups {
		name := fmt.Sprintf("warmup-%d", i)
		base.Tenants = append(base.Tenants, config.Tenant{Name: name, Keys: []string{"sk-" + name}, Priority: config.PriorityInteractive})
	}
	decided := &decisions{at: map[string][]time.Time{}}
	var nodes []*node.Node
	defer func() {
		for _, n := range nodes {
			_ = n.Close()
		}
	}()
	start := func(name string) (*node.Node, error) {
		cfg := *base
		cfg.Node.Name = name
		if len(nodes) > 0 {
			cfg.Node.Join = []string{nodes[0].GossipAddr()}
		}
		n, err := node.Start(&cfg, node.Options{Logger: logger, Tokenizer: tok, DrainGrace: 300 * time.Millisecond, OnAdmit: decided.add})
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
		return n, nil
	}
	fmt.Fprintf(out, "ringgate demo: fake upstream on %s, window %s\n", upAddr, *window)
	for i := 1; i <= 3; i++ {
		n, err := start(fmt.Sprintf("node-%d", i))
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  started %s on %s (gossip %s)\n", n.Name(), n.Addr(), n.GossipAddr())
	}
	if !converged(ctx, nodes, 3) {
		return fmt.Errorf("the 3 nodes did not form a ring in time")
	}
	printOwners(out, nodes[0])

	targets := &atomic.Pointer[[]string]{}
	setTargets := func(ns []*node.Node) {
		var addrs []string
		for _, n := range ns {
			addrs = append(addrs, n.Addr())
		}
		targets.Store(&addrs)
	}
	setTargets(nodes)
	warmUp(nodes)
	total := time.Duration(*windows) * *window
	fmt.Fprintf(out, "\ndriving %s of load at up to 2x each tenant's limits, spread over every node...\n", total)
	done := make(chan []outcome, 1)
	go func() { done <- drive(ctx, targets, *window, *windows) }()

	sleepCtx(ctx, total/3)
	fmt.Fprintln(out, "\nscale up: adding node-4")
	n4, err := start("node-4")
	if err != nil {
		return err
	}
	converged(ctx, nodes, 4)
	setTargets(nodes)

	sleepCtx(ctx, total/3)
	fmt.Fprintln(out, "\nscale down: draining node-2 (the load balancer stops sending it new work)")
	drained := nodes[1]
	setTargets([]*node.Node{nodes[0], nodes[2], n4})
	drainDone := make(chan bool, 1)
	go func() { drainDone <- drained.Drain() }()

	res := <-done
	fmt.Fprintf(out, "  node-2 drained cleanly: %t\n\n", <-drainDone)
	var recs []fakeupstream.Record
	for _, r := range fake.Records() {
		if !strings.HasPrefix(r.User, "warmup-") {
			recs = append(recs, r)
		}
	}
	report(out, res, recs, decided, *window)
	return nil
}

// converged waits until every running node's ring has want members.
func converged(ctx context.Context, nodes []*node.Node, want int) bool {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ok := true
		for _, n := range nodes {
			if r := n.Ring(); r == nil || r.Len() != want {
				ok = false
			}
		}
		if ok {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func printOwners(out io.Writer, n *node.Node) {
	r := n.Ring()
	fmt.Fprintf(out, "  ring v%d %v:", r.Version(), r.Members())
	for _, t := range tenants {
		o, _ := r.Owner(t.name)
		fmt.Fprintf(out, " %s→%s", t.name, o)
	}
	fmt.Fprintln(out)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

type outcome struct {
	tenant string
	at     time.Time
	status int
	node   string // x-ringgate-node: who enforced the tenant's limits
}

// drive offers each tenant its demand, spread evenly over the nodes.
func drive(ctx context.Context, targets *atomic.Pointer[[]string], window time.Duration, windows int) []outcome {
	client := &fasthttp.Client{MaxConnsPerHost: 512, ReadTimeout: 30 * time.Second}
	deadline := time.Now().Add(time.Duration(windows) * window)
	var mu sync.Mutex
	var out []outcome
	var wg sync.WaitGroup
	var rr atomic.Int64
	for _, t := range tenants {
		gap := window / time.Duration(t.demandPerWindow)
		wg.Add(1)
		go func(t demoTenant) {
			defer wg.Done()
			tick := time.NewTicker(gap)
			defer tick.Stop()
			var inner sync.WaitGroup
			defer inner.Wait()
			rng := rand.New(rand.NewSource(int64(len(t.name))))
			for time.Now().Before(deadline) {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				addrs := *targets.Load()
				addr := addrs[int(rr.Add(1))%len(addrs)]
				words := 20 + rng.Intn(200)
				inner.Add(1)
				go func() {
					defer inner.Done()
					status, node := call(client, addr, t, words)
					mu.Lock()
					out = append(out, outcome{tenant: t.name, at: time.Now(), status: status, node: node})
					mu.Unlock()
				}()
			}
		}(t)
	}
	wg.Wait()
	return out
}

func call(c *fasthttp.Client, addr string, t demoTenant, words int) (int, string) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + addr + "/v1/chat/completions")
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.Set("Authorization", "Bearer sk-"+t.name)
	req.Header.SetContentType("application/json")
	prompt := strings.Repeat("tell me more ", words/3+1)
	req.SetBodyString(fmt.Sprintf(`{"model":"gpt-4o-mini","user":%q,"stream":%t,"max_tokens":2000,"messages":[{"role":"user","content":%q}]}`,
		t.name, t.stream, prompt))
	if err := c.DoTimeout(req, resp, 30*time.Second); err != nil {
		return 0, ""
	}
	return resp.StatusCode(), string(resp.Header.Peek("x-ringgate-node"))
}

// warmups are unlimited tenants, not shown, whose requests through every
// node open the connections (node to node, node to provider) before the
// measured load: a first dial on a loaded machine can delay the first
// requests by tens of milliseconds, which the auditor, reading the
// provider's arrival times, would see as requests bunched into a window.
const warmups = 8

func warmUp(nodes []*node.Node) {
	c := &fasthttp.Client{}
	for i := range warmups {
		t := demoTenant{name: fmt.Sprintf("warmup-%d", i)}
		for _, n := range nodes {
			call(c, n.Addr(), t, 3)
		}
	}
}

// report prints, per tenant and window, what reached the upstream against the
// limit, and what the clients were told.
func report(out io.Writer, res []outcome, recs []fakeupstream.Record, decided *decisions, window time.Duration) {
	if len(recs) == 0 {
		fmt.Fprintln(out, "nothing reached the upstream")
		return
	}
	start := recs[0].Received
	for _, r := range recs {
		if r.Received.Before(start) {
			start = r.Received
		}
	}
	type cell struct{ reqs, tokens int }
	byTenant := map[string]map[int]*cell{}
	for _, r := range recs {
		w := int(r.Received.Sub(start) / window)
		m := byTenant[r.User]
		if m == nil {
			m = map[int]*cell{}
			byTenant[r.User] = m
		}
		c := m[w]
		if c == nil {
			c = &cell{}
			m[w] = c
		}
		c.reqs++
		c.tokens += r.PromptTokens + r.CompletionTokens
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tenant\twindow\trequests\trpm limit\ttokens\ttpm limit\t")
	for _, t := range tenants {
		m := byTenant[t.name]
		var ws []int
		for w := range m {
			ws = append(ws, w)
		}
		sort.Ints(ws)
		for _, w := range ws {
			c := m[w]
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t\n", t.name, w+1, c.reqs, t.rpm, c.tokens, t.tpm)
		}
	}
	_ = tw.Flush()

	fmt.Fprintf(out, "\nthe auditor's view: the most any sliding %s window ever held, and what clients were told\n", window)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	var over, bunched, others []string
	fmt.Fprintln(tw, "tenant\tmax requests\tmax decided\trpm limit\tmax tokens\ttpm limit\t200\t429\tother\tenforced by\t")
	for _, t := range tenants {
		var times []time.Time
		var toks []audit.Event
		for _, r := range recs {
			if r.User == t.name {
				times = append(times, r.Received)
				toks = append(toks, audit.Event{At: r.Received, Weight: int64(r.PromptTokens + r.CompletionTokens)})
			}
		}
		maxReq, maxTok := audit.MaxIn(times, window).Count, audit.MaxWeightIn(toks, window).Weight
		// The verdict allows for the loopback delay between a node's
		// decision and the provider's arrival stamp, which varies by a
		// few milliseconds (tens on a loaded machine): it audits windows
		// shorter by verdictSlack of the window. A real breach (a second
		// owner, a fresh window) puts whole requests well inside.
		span := window - window/verdictSlack
		// The nodes' own decisions, stamped by the one clock they share
		// in this process: exact, whole windows, no slack. They decide
		// the verdict; the provider's arrival stamps are shown beside
		// them, and where they bunch by more than the slack (a loaded
		// machine delays some calls on their way more than others) the
		// report says so.
		maxDecided := audit.MaxIn(decided.of(t.name), window).Count
		if maxDecided > t.rpm {
			over = append(over, fmt.Sprintf("%s: %d admissions of %d decided within %v", t.name, maxDecided, t.rpm, window))
		}
		if n := audit.MaxIn(times, span).Count; n > t.rpm {
			bunched = append(bunched, fmt.Sprintf("%s: %d of %d", t.name, n, t.rpm))
		}
		if n := audit.MaxWeightIn(toks, span).Weight; n > int64(t.tpm) {
			over = append(over, fmt.Sprintf("%s: %d tokens of %d", t.name, n, t.tpm))
		}
		codes := map[int]int{}
		nodes := map[string]int{}
		for _, o := range res {
			if o.tenant == t.name {
				codes[o.status]++
				if o.node != "" {
					nodes[o.node]++
				}
			}
		}
		var names []string
		for n := range nodes {
			names = append(names, n)
		}
		sort.Strings(names)
		other := 0
		for _, c := range slices.Sorted(maps.Keys(codes)) {
			if k := codes[c]; c != 200 && c != 429 {
				other += k
				what := fmt.Sprint(c)
				if c == 0 {
					what = "no answer"
				}
				others = append(others, fmt.Sprintf("%s: %s ×%d", t.name, what, k))
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", t.name, maxReq, maxDecided, t.rpm, maxTok, t.tpm,
			codes[200], codes[429], other, strings.Join(names, ","))
	}
	_ = tw.Flush()
	if len(others) > 0 {
		fmt.Fprintf(out, "\nother answers: %s\n", strings.Join(others, "; "))
	}
	if len(bunched) > 0 {
		fmt.Fprintf(out, "\nnote: at the provider, arrivals bunched past the %v allowance for the delay on the way (%s requests in a window of %v),\n"+
			"      while the nodes decided at most the limit in every %v: calls were delayed unevenly after the decision (a loaded machine)\n",
			window/verdictSlack, strings.Join(bunched, ", "), span(window), window)
	}
	if len(over) == 0 {
		fmt.Fprintf(out, "\nverdict: every tenant within its limits in every sliding window (of %v as the nodes decided; the tokens as the provider counted them, in windows less %v for the delay on the way)\n",
			window, window/verdictSlack)
	} else {
		fmt.Fprintf(out, "\nverdict: OVER THE LIMIT in some window: %s\n", strings.Join(over, "; "))
	}
	fmt.Fprintln(out, "\n(a tenant is enforced by its owner and moves with its state when the ring changes: the")
	fmt.Fprintln(out, " previous owner hands it to the new one directly, no Redis needed; with -redis HOST:PORT")
	fmt.Fprintln(out, " snapshots also cover a node that crashes)")
}

func span(window time.Duration) time.Duration { return window - window/verdictSlack }

// decisions are the admissions the nodes decided, by tenant (node.Options.OnAdmit).
type decisions struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (d *decisions) add(tenant string, at int64) {
	d.mu.Lock()
	d.at[tenant] = append(d.at[tenant], time.Unix(0, at))
	d.mu.Unlock()
}

func (d *decisions) of(tenant string) []time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]time.Time(nil), d.at[tenant]...)
}

// verdictSlack: the verdict audits windows 1/verdictSlack shorter (see report).
const verdictSlack = 64

// eventLog prints the operational events (rebalance, handoff, fallback,
// drain) from the nodes' JSON logs, so the demo shows what an operator sees.
type eventLog struct {
	w       io.Writer
	verbose bool
}

func (e *eventLog) Write(p []byte) (int, error) {
	if e.verbose {
		return len(p), nil
	}
	for _, ev := range []string{`"msg":"rebalance"`, `"msg":"handoff"`, `"msg":"fallback"`, `"msg":"drain"`} {
		if strings.Contains(string(p), ev) {
			fmt.Fprintf(e.w, "  log: %s", p)
			break
		}
	}
	return len(p), nil
}

// lockedWriter serialises writes from the nodes' loggers and the demo.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
