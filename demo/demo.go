// Package demo runs a self-contained ringgate on loopback for a first look:
// a fake provider, gateway nodes, a few tenants and load through every node,
// then a table of what each tenant got against its limit in every window.
// It needs no Redis and no configuration; it owns nothing the product uses.
package demo

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
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
	if err := fs.Parse(args); err != nil {
		return err
	}

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
	defer fake.Close()

	cfg := config.Default()
	cfg.Node.Name = "node-1"
	cfg.Node.Listen = "127.0.0.1:0"
	cfg.Limits.Window = *window
	cfg.Upstreams = []config.Upstream{{
		Name: "fake", Kind: config.KindOpenAI, BaseURL: "http://" + upAddr,
		Models: []string{"gpt-4o-mini"}, ConnectTimeout: time.Second, Timeout: 30 * time.Second,
		AnthropicVersion: config.DefaultAnthropicVersion,
	}}
	for _, t := range tenants {
		cfg.Tenants = append(cfg.Tenants, config.Tenant{
			Name: t.name, Keys: []string{"sk-" + t.name}, RPM: t.rpm, TPM: t.tpm, Concurrency: t.conc,
			Priority: config.PriorityInteractive,
		})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	n, err := node.Start(cfg, node.Options{Logger: logger, Tokenizer: tok, Listener: ln})
	if err != nil {
		return err
	}
	defer n.Close()

	fmt.Fprintf(out, "ringgate demo: fake upstream on %s, node %s on %s, window %s\n", upAddr, n.Name(), n.Addr(), *window)
	fmt.Fprintf(out, "driving %d windows of load at up to 2x each tenant's limit...\n\n", *windows)

	res := drive(ctx, []string{n.Addr()}, *window, *windows)
	report(out, res, fake.Records(), *window)
	return nil
}

type outcome struct {
	tenant string
	at     time.Time
	status int
}

// drive offers each tenant its demand, spread evenly over the nodes.
func drive(ctx context.Context, addrs []string, window time.Duration, windows int) []outcome {
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
				addr := addrs[int(rr.Add(1))%len(addrs)]
				words := 20 + rng.Intn(200)
				inner.Add(1)
				go func() {
					defer inner.Done()
					status := call(client, addr, t, words)
					mu.Lock()
					out = append(out, outcome{tenant: t.name, at: time.Now(), status: status})
					mu.Unlock()
				}()
			}
		}(t)
	}
	wg.Wait()
	return out
}

func call(c *fasthttp.Client, addr string, t demoTenant, words int) int {
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
		return 0
	}
	return resp.StatusCode()
}

// report prints, per tenant and window, what reached the upstream against the
// limit, and what the clients were told.
func report(out io.Writer, res []outcome, recs []fakeupstream.Record, window time.Duration) {
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
	statuses := map[string]map[int]int{}
	for _, o := range res {
		if statuses[o.tenant] == nil {
			statuses[o.tenant] = map[int]int{}
		}
		statuses[o.tenant][o.status]++
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
	tw.Flush()
	fmt.Fprintln(out)
	fmt.Fprintln(out, "answers the clients got:")
	for _, t := range tenants {
		s := statuses[t.name]
		fmt.Fprintf(out, "  %-8s 200: %d  429: %d  other: %d\n", t.name, s[200], s[429], len(res)-s[200]-s[429]-countOthers(res, t.name))
	}
	fmt.Fprintf(out, "\n(windows are counted from the first request the upstream saw; limits are per %s sliding window)\n", window)
}

func countOthers(res []outcome, tenant string) int {
	n := 0
	for _, o := range res {
		if o.tenant != tenant {
			n++
		}
	}
	return n
}

// eventLog prints the operational events (rebalance, handoff, fallback,
// drain) from the nodes' JSON logs, so the demo shows what an operator sees.
type eventLog struct {
	mu      sync.Mutex
	w       io.Writer
	verbose bool
}

func (e *eventLog) Write(p []byte) (int, error) {
	if e.verbose {
		return len(p), nil
	}
	for _, ev := range []string{`"msg":"rebalance"`, `"msg":"handoff"`, `"msg":"fallback"`, `"msg":"drain"`} {
		if strings.Contains(string(p), ev) {
			e.mu.Lock()
			fmt.Fprintf(e.w, "  log: %s", p)
			e.mu.Unlock()
			break
		}
	}
	return len(p), nil
}
