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

// flags are the demo's command line.
type flags struct {
	window    time.Duration
	windows   int
	verbose   bool
	redisAddr string
	queued    bool
}

// Run starts the demo and prints to out until it is done or ctx ends.
func Run(ctx context.Context, args []string, out io.Writer) error {
	f, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	out = &lockedWriter{w: out} // node logs and the demo's own lines interleave
	logger := nodeLogger(out, f.verbose)
	tok, err := reserve.NewTokenizer()
	if err != nil {
		return err
	}
	fake, upAddr, err := startFake(tok)
	if err != nil {
		return err
	}
	defer func() { _ = fake.Close() }()
	base, err := baseConfig(f, upAddr)
	if err != nil {
		return err
	}
	decided := &decisions{at: map[string][]time.Time{}, byID: map[string]time.Time{}}
	c := &cluster{base: base, opts: node.Options{Logger: logger, Tokenizer: tok, DrainGrace: 300 * time.Millisecond, OnAdmit: decided.add}}
	defer c.close()
	fmt.Fprintf(out, "ringgate demo: fake upstream on %s, window %s\n", upAddr, f.window)
	if err := c.form(ctx, out); err != nil {
		return err
	}
	res, err := c.rescaleUnderLoad(ctx, out, f.window, f.windows)
	if err != nil {
		return err
	}
	report(out, res, measured(fake.Records()), decided, f.window)
	return nil
}

// parseFlags reads the command line; its usage and errors go to out.
func parseFlags(args []string, out io.Writer) (flags, error) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(out)
	var f flags
	fs.DurationVar(&f.window, "window", 5*time.Second, "sliding window of the demo's limits")
	fs.IntVar(&f.windows, "windows", 4, "how many windows of load to run")
	fs.BoolVar(&f.verbose, "v", false, "print every node log line")
	fs.StringVar(&f.redisAddr, "redis", "", "Redis host:port for handoff snapshots (default: none)")
	fs.BoolVar(&f.queued, "queue", false, "let refused requests wait for room ([queue] defaults) instead of a 429 at once")
	err := fs.Parse(args)
	return f, err
}

// nodeLogger is the nodes' logger: every line to out if verbose, else only
// the operational events (eventLog).
func nodeLogger(out io.Writer, verbose bool) *slog.Logger {
	logOut := io.Discard
	if verbose {
		logOut = out
	}
	logs := &eventLog{w: out, verbose: verbose}
	return slog.New(slog.NewJSONHandler(io.MultiWriter(logOut, logs), nil))
}

// startFake starts the fake provider on loopback, counting tokens as the
// nodes do.
func startFake(tok *reserve.Tokenizer) (*fakeupstream.Server, string, error) {
	fake := fakeupstream.New(fakeupstream.Options{
		Latency: 20 * time.Millisecond, ChunkInterval: 2 * time.Millisecond,
		CompletionMin: 40, CompletionMax: 160, Seed: 1,
		CountTokens: tok.Count,
	})
	upAddr, err := fake.Start("127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("start fake upstream: %w", err)
	}
	return fake, upAddr, nil
}

// baseConfig is the config every node starts from (its name and seed
// aside): loopback, a fresh cluster secret, the fake provider, the demo's
// tenants and the warm-up ones.
func baseConfig(f flags, upAddr string) (*config.Config, error) {
	secret := make([]byte, 32)
	if _, err := crand.Read(secret); err != nil {
		return nil, err
	}
	base := config.Default()
	base.Node.Listen = "127.0.0.1:0"
	base.Node.Gossip = "127.0.0.1:0"
	base.Node.DrainTimeout = 10 * time.Second
	base.Cluster.Secret = secret
	base.Limits.Window = f.window
	if !f.queued {
		// The auditor reads the provider's arrival times: queued requests
		// go in the instant room frees, packed at the window's edge, so a
		// loaded machine's delay to the provider (tens of ms) shows as a
		// few requests over in a window, as it would to any auditor at
		// the provider. The demo shows the limits; -queue shows the wait.
		base.Queue.InteractiveWait, base.Queue.BatchWait = 0, 0
	}
	if f.redisAddr != "" {
		base.Redis.Addr = f.redisAddr
		base.Redis.SnapshotInterval = f.window / 10
	}
	base.Upstreams = []config.Upstream{{
		Name: "fake", Kind: config.KindOpenAI, BaseURL: "http://" + upAddr,
		Models: []string{"gpt-4o-mini"}, ConnectTimeout: time.Second, Timeout: 30 * time.Second,
		StreamIdleTimeout: 30 * time.Second, AnthropicVersion: config.DefaultAnthropicVersion,
	}}
	base.Tenants = configTenants()
	return base, nil
}

// configTenants are the demo's tenants with their limits, then the
// unlimited warm-up ones.
func configTenants() []config.Tenant {
	var ts []config.Tenant
	for _, t := range tenants {
		ts = append(ts, config.Tenant{
			Name: t.name, Keys: []string{"sk-" + t.name}, RPM: t.rpm, TPM: t.tpm, Concurrency: t.conc,
			Priority: config.PriorityInteractive,
		})
	}
	for i := range warmups {
		name := fmt.Sprintf("warmup-%d", i)
		ts = append(ts, config.Tenant{Name: name, Keys: []string{"sk-" + name}, Priority: config.PriorityInteractive})
	}
	return ts
}

// cluster is the demo's gateway nodes, each started from base, and the
// addresses the load goes to (the load balancer's list).
type cluster struct {
	base    *config.Config
	opts    node.Options
	nodes   []*node.Node
	targets atomic.Pointer[[]string]
}

// start starts a node named name that joins the first node.
func (c *cluster) start(name string) (*node.Node, error) {
	cfg := *c.base
	cfg.Node.Name = name
	if len(c.nodes) > 0 {
		cfg.Node.Join = []string{c.nodes[0].GossipAddr()}
	}
	n, err := node.Start(&cfg, c.opts)
	if err != nil {
		return nil, err
	}
	c.nodes = append(c.nodes, n)
	return n, nil
}

// close stops every node started, at once.
func (c *cluster) close() {
	for _, n := range c.nodes {
		_ = n.Close()
	}
}

// setTargets makes the load go to ns.
func (c *cluster) setTargets(ns []*node.Node) {
	var addrs []string
	for _, n := range ns {
		addrs = append(addrs, n.Addr())
	}
	c.targets.Store(&addrs)
}

// form starts three nodes and waits for their ring.
func (c *cluster) form(ctx context.Context, out io.Writer) error {
	for i := 1; i <= 3; i++ {
		n, err := c.start(fmt.Sprintf("node-%d", i))
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  started %s on %s (gossip %s)\n", n.Name(), n.Addr(), n.GossipAddr())
	}
	if !converged(ctx, c.nodes, 3) {
		return fmt.Errorf("the 3 nodes did not form a ring in time")
	}
	printOwners(out, c.nodes[0])
	return nil
}

// rescaleUnderLoad drives windows windows of load through every node,
// adds node-4 after a third of the time and drains node-2 after two
// thirds; it returns what the clients were told.
func (c *cluster) rescaleUnderLoad(ctx context.Context, out io.Writer, window time.Duration, windows int) ([]outcome, error) {
	c.setTargets(c.nodes)
	warmUp(c.nodes)
	total := time.Duration(windows) * window
	fmt.Fprintf(out, "\ndriving %s of load at up to 2x each tenant's limits, spread over every node...\n", total)
	done := make(chan []outcome, 1)
	go func() { done <- drive(ctx, &c.targets, window, windows) }()

	sleepCtx(ctx, total/3)
	fmt.Fprintln(out, "\nscale up: adding node-4")
	n4, err := c.start("node-4")
	if err != nil {
		return nil, err
	}
	converged(ctx, c.nodes, 4)
	c.setTargets(c.nodes)

	sleepCtx(ctx, total/3)
	fmt.Fprintln(out, "\nscale down: draining node-2 (the load balancer stops sending it new work)")
	drained := c.nodes[1]
	c.setTargets([]*node.Node{c.nodes[0], c.nodes[2], n4})
	drainDone := make(chan bool, 1)
	go func() { drainDone <- drained.Drain() }()

	res := <-done
	fmt.Fprintf(out, "  node-2 drained cleanly: %t\n\n", <-drainDone)
	return res, nil
}

// measured are the provider's records of the demo's tenants, without the
// warm-up's.
func measured(all []fakeupstream.Record) []fakeupstream.Record {
	var recs []fakeupstream.Record
	for _, r := range all {
		if !strings.HasPrefix(r.User, "warmup-") {
			recs = append(recs, r)
		}
	}
	return recs
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
	printWindows(out, recs, window)
	fmt.Fprintf(out, "\nthe auditor's view: the most any sliding %s window ever held, and what clients were told\n", window)
	f := printAudit(out, res, recs, decided, window)
	f.print(out, window)
}

// windowTotals are what reached the provider for one tenant in one fixed
// window.
type windowTotals struct{ reqs, tokens int }

// printWindows prints, per tenant and fixed window, what reached the
// provider against the limits.
func printWindows(out io.Writer, recs []fakeupstream.Record, window time.Duration) {
	byTenant := perWindow(recs, window)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tenant\twindow\trequests\trpm limit\ttokens\ttpm limit\t")
	for _, t := range tenants {
		m := byTenant[t.name]
		for _, w := range slices.Sorted(maps.Keys(m)) {
			c := m[w]
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t\n", t.name, w+1, c.reqs, t.rpm, c.tokens, t.tpm)
		}
	}
	_ = tw.Flush()
}

// perWindow sums recs by tenant and fixed window, the first window starting
// at the first arrival.
func perWindow(recs []fakeupstream.Record, window time.Duration) map[string]map[int]*windowTotals {
	start := recs[0].Received
	for _, r := range recs {
		if r.Received.Before(start) {
			start = r.Received
		}
	}
	byTenant := map[string]map[int]*windowTotals{}
	for _, r := range recs {
		w := int(r.Received.Sub(start) / window)
		m := byTenant[r.User]
		if m == nil {
			m = map[int]*windowTotals{}
			byTenant[r.User] = m
		}
		c := m[w]
		if c == nil {
			c = &windowTotals{}
			m[w] = c
		}
		c.reqs++
		c.tokens += r.PromptTokens + r.CompletionTokens
	}
	return byTenant
}

// findings are what the auditor found beyond its table's rows: they make
// the lines under it.
type findings struct {
	over    []string // the limits broken: they make the verdict
	bunched []string // arrivals at the provider bunched past the slack
	unknown int      // calls at the provider whose decision is not on record
	others  []string // answers neither 200 nor 429
}

// peaks are the most a tenant's sliding windows held.
type peaks struct {
	requests    int   // at the provider
	decided     int   // as the nodes decided
	tokens      int64 // at the provider
	decidedToks int64 // at the nodes' decisions
}

// answers are what a tenant's clients were told.
type answers struct {
	codes map[int]int // by status, 0 for no answer
	other int         // neither 200 nor 429
	nodes []string    // who enforced its limits (x-ringgate-node), sorted
}

// printAudit prints the auditor's table: per tenant, the most any sliding
// window held against the limits, and what the clients were told.
func printAudit(out io.Writer, res []outcome, recs []fakeupstream.Record, decided *decisions, window time.Duration) findings {
	var f findings
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tenant\tmax requests\tmax decided\trpm limit\tmax tokens\tmax decided\ttpm limit\t200\t429\tother\tenforced by\t")
	for _, t := range tenants {
		p := f.audit(t, recs, decided, window)
		a := f.answersTo(t, res)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", t.name, p.requests, p.decided, t.rpm, p.tokens, p.decidedToks, t.tpm,
			a.codes[200], a.codes[429], a.other, strings.Join(a.nodes, ","))
	}
	_ = tw.Flush()
	return f
}

// audit finds t's peaks and notes where they break its limits or where
// arrivals bunched at the provider.
func (f *findings) audit(t demoTenant, recs []fakeupstream.Record, decided *decisions, window time.Duration) peaks {
	ev := eventsOf(t.name, recs, decided)
	f.unknown += ev.unknown
	p := peaks{requests: audit.MaxIn(ev.arrived, window).Count, tokens: audit.MaxWeightIn(ev.arrivedToks, window).Weight}
	// The nodes' own decisions, stamped by the one clock they share
	// in this process, and each call's tokens at its decision: exact,
	// whole windows, no slack. They decide the verdict.
	p.decided = audit.MaxIn(decided.of(t.name), window).Count
	p.decidedToks = audit.MaxWeightIn(ev.decidedToks, window).Weight
	if p.decided > t.rpm {
		f.over = append(f.over, fmt.Sprintf("%s: %d admissions of %d decided within %v", t.name, p.decided, t.rpm, window))
	}
	if p.decidedToks > int64(t.tpm) {
		f.over = append(f.over, fmt.Sprintf("%s: %d tokens of %d decided within %v", t.name, p.decidedToks, t.tpm, window))
	}
	// The provider's arrival stamps trail the decisions by a loopback
	// delay of a few milliseconds (tens on a loaded machine): shown
	// beside them, and where they bunch by more than verdictSlack of
	// the window (calls delayed unevenly on their way) the report says
	// so.
	short := span(window)
	if n := audit.MaxIn(ev.arrived, short).Count; n > t.rpm {
		f.bunched = append(f.bunched, fmt.Sprintf("%s: %d requests of %d", t.name, n, t.rpm))
	}
	if n := audit.MaxWeightIn(ev.arrivedToks, short).Weight; n > int64(t.tpm) {
		f.bunched = append(f.bunched, fmt.Sprintf("%s: %d tokens of %d", t.name, n, t.tpm))
	}
	return p
}

// events are one tenant's calls as the provider saw them and as the
// nodes decided them.
type events struct {
	arrived                  []time.Time
	arrivedToks, decidedToks []audit.Event
	unknown                  int // calls whose decision is not on record
}

// eventsOf reads tenant's calls from the provider's records; a call whose
// decision is unknown counts at its arrival.
func eventsOf(tenant string, recs []fakeupstream.Record, decided *decisions) events {
	var ev events
	for _, r := range recs {
		if r.User != tenant {
			continue
		}
		w := int64(r.PromptTokens + r.CompletionTokens)
		ev.arrived = append(ev.arrived, r.Received)
		ev.arrivedToks = append(ev.arrivedToks, audit.Event{At: r.Received, Weight: w})
		at, ok := decided.decidedAt(r.RequestID)
		if !ok {
			at = r.Received
			ev.unknown++
		}
		ev.decidedToks = append(ev.decidedToks, audit.Event{At: at, Weight: w})
	}
	return ev
}

// answersTo counts what t's clients were told and notes the answers
// neither 200 nor 429.
func (f *findings) answersTo(t demoTenant, res []outcome) answers {
	a := answers{codes: map[int]int{}}
	enforcers := map[string]bool{}
	for _, o := range res {
		if o.tenant == t.name {
			a.codes[o.status]++
			if o.node != "" {
				enforcers[o.node] = true
			}
		}
	}
	a.nodes = slices.Sorted(maps.Keys(enforcers))
	for _, c := range slices.Sorted(maps.Keys(a.codes)) {
		if k := a.codes[c]; c != 200 && c != 429 {
			a.other += k
			what := fmt.Sprint(c)
			if c == 0 {
				what = "no answer"
			}
			f.others = append(f.others, fmt.Sprintf("%s: %s ×%d", t.name, what, k))
		}
	}
	return a
}

// print prints the lines under the auditor's table: the other answers, the
// bunched arrivals, the verdict and how a tenant's state moves.
func (f *findings) print(out io.Writer, window time.Duration) {
	if len(f.others) > 0 {
		fmt.Fprintf(out, "\nother answers: %s\n", strings.Join(f.others, "; "))
	}
	if f.unknown > 0 {
		fmt.Fprintf(out, "\nnote: %d calls reached the provider with no decision on record: their tokens count at their arrival\n", f.unknown)
	}
	if len(f.bunched) > 0 {
		fmt.Fprintf(out, "\nnote: at the provider, arrivals bunched past the %v allowance for the delay on the way (%s in a window of %v),\n"+
			"      while the nodes decided at most the limit in every %v: calls were delayed unevenly after the decision (a loaded machine)\n",
			window/verdictSlack, strings.Join(f.bunched, ", "), span(window), window)
	}
	if len(f.over) == 0 {
		fmt.Fprintf(out, "\nverdict: every tenant within its limits in every sliding window of %v as the nodes decided (each call's tokens as the provider counted them)\n",
			window)
	} else {
		fmt.Fprintf(out, "\nverdict: OVER THE LIMIT in some window: %s\n", strings.Join(f.over, "; "))
	}
	fmt.Fprintln(out, "\n(a tenant is enforced by its owner and moves with its state when the ring changes: the")
	fmt.Fprintln(out, " previous owner hands it to the new one directly, no Redis needed; with -redis HOST:PORT")
	fmt.Fprintln(out, " snapshots also cover a node that crashes)")
}

func span(window time.Duration) time.Duration { return window - window/verdictSlack }

// decisions are the admissions the nodes decided, by tenant, and when
// each request was decided, by its x-request-id (node.Options.OnAdmit),
// which the provider's records carry: a call's tokens are audited at its
// decision.
type decisions struct {
	mu   sync.Mutex
	at   map[string][]time.Time
	byID map[string]time.Time
}

func (d *decisions) add(tenant string, at int64, id []byte) {
	d.mu.Lock()
	d.at[tenant] = append(d.at[tenant], time.Unix(0, at))
	d.byID[string(id)] = time.Unix(0, at)
	d.mu.Unlock()
}

// decidedAt is when the request id was decided.
func (d *decisions) decidedAt(id string) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.byID[id]
	return at, ok
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
