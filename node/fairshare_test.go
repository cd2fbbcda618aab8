package node

import (
	"cmp"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/internal/benchout"
	"github.com/ringgate/ringgate/internal/redistest"
	"github.com/ringgate/ringgate/reserve"
	"github.com/ringgate/ringgate/ring"
)

// The provider's limits shared among the tenants that want them, whatever
// node the ring placed each on. Placement is pinned by the tenants' names:
// placedTenants picks names that the ring of the nodes' names (n1, n2, n3:
// the same ring.New, the same hash) gives the owners a case asks for, and
// the test checks the live ring agrees. The fake provider counts what it
// admitted of each tenant (its records' user).

// placedTenants picks tenant names that a ring of members places as
// wanted: placement[i] is the member the i-th tenant must be owned by.
func placedTenants(t *testing.T, members []string, placement []string) []string {
	t.Helper()
	r := ring.New(1, members)
	var out []string
	used := map[string]bool{}
	for _, want := range placement {
		for i := 0; ; i++ {
			if i > 10000 {
				t.Fatalf("no tenant name owned by %s", want)
			}
			name := fmt.Sprintf("fair-%d", i)
			if o, _ := r.Owner(name); o == want && !used[name] {
				used[name] = true
				out = append(out, name)
				break
			}
		}
	}
	return out
}

// jain is Jain's fairness index of xs each divided by its weight: 1 when
// every x is its weight's share, 1/n at worst.
func jain(xs, weights []float64) float64 {
	var s, s2 float64
	for i, x := range xs {
		y := x / weights[i]
		s += y
		s2 += y * y
	}
	if s2 == 0 {
		return 1
	}
	return s * s / (float64(len(xs)) * s2)
}

// fairCase is one provider budget wanted by tenants placed on the nodes.
type fairCase struct {
	name      string
	upstream  func(*config.Upstream)
	fake      fakeupstream.ProviderLimits
	latency   time.Duration
	placement []string // the owner of each tenant
	// tune sets a tenant's own limits (its weight) or priority.
	tune func(i int, tn *config.Tenant)
	// rate is each tenant's demand: requests a second.
	rate []float64
	// want is what each tenant should get of what the provider admitted,
	// as a fraction (the max-min fair division).
	want []float64
	// body, if set, is the request each tenant sends.
	body func(tenant string, stream bool) []byte
	// during, if set, runs while the load does (a scale-up, a drain).
	during func(c *clCluster, lb *balancer, start time.Time)
	// tokens: check the token limit is used in full.
	tokens int64
	// clients, if set, makes each tenant that many clients sending one
	// request after the other (a closed loop), not a steady rate; a
	// client refused waits what retry-after-ms says.
	clients int
	// wait is the queue's wait budget (2 s if 0).
	wait time.Duration
	// reportOnly: the case is measured by TestFairShareReport, not
	// asserted (what clients do after a refusal moves its figures).
	reportOnly bool
}

type fairResult struct {
	got      []float64 // admitted at the provider per tenant after the first window
	breaches int64
	worst    int // fullest window, requests
	// Tokens charged at the provider: the fullest window, the emptiest
	// after the first, and the mean a window, while the load ran.
	fullestTokens, emptiestTokens, meanTokens int64
}

// share is each tenant's part of what the provider admitted.
func (r fairResult) share() []float64 {
	var sum float64
	for _, g := range r.got {
		sum += g
	}
	out := make([]float64, len(r.got))
	for i, g := range r.got {
		out[i] = g / max(sum, 1)
	}
	return out
}

// runFair runs fc's load for dur on three nodes, leasing from Redis (redis
// true) or without it (each node on its strict share: limit / members, a
// per-node split), with the default queue: a refused request waits for
// room up to 2 s.
func runFair(t *testing.T, fc fairCase, window, dur time.Duration, redis bool) fairResult {
	t.Helper()
	names := placedTenants(t, []string{"n1", "n2", "n3"}, fc.placement)
	tenants := make([]config.Tenant, len(names))
	for i, n := range names {
		tenants[i] = clTenant(n, 1<<30)
		if fc.tune != nil {
			fc.tune(i, &tenants[i])
		}
	}
	wait := cmp.Or(fc.wait, 2*time.Second)
	opts := clOptions{Upstream: fc.upstream, RedisTimeout: auditRedisTimeout,
		Queue: &config.Queue{InteractiveWait: wait, BatchWait: wait, MaxDepth: 1000}}
	if redis {
		opts.Redis = redistest.Start(t).Addr()
	}
	c := startClusterWith(t, 3, window, opts, tenants...)
	for i, n := range names {
		if o := c.owner(n); o != fc.placement[i] {
			t.Fatalf("%s is owned by %s, want %s", n, o, fc.placement[i])
		}
	}
	c.fake.SetOptions(fakeupstream.Options{CountTokens: mustTokenizer(t).Count, CompletionMin: 20, CompletionMax: 40,
		Latency: fc.latency, Limits: fc.fake})
	c.fake.Reset()
	c.body = fc.body
	if !redis {
		// A node without Redis that started in a cluster charges its
		// share as used for its first window: past it here.
		time.Sleep(window)
	}
	start := time.Now().Add(50 * time.Millisecond)
	lb := &balancer{nodes: c.live()}
	var wg sync.WaitGroup
	for i, n := range names {
		if fc.clients > 0 {
			for range fc.clients {
				wg.Go(func() {
					for time.Now().Before(start.Add(dur)) {
						rep, err := c.post(lb.pick(), n, false, nil)
						if err != nil || rep.status == http.StatusOK {
							continue
						}
						ms, _ := strconv.Atoi(rep.header.Get("retry-after-ms"))
						time.Sleep(time.Duration(max(ms, 1)) * time.Millisecond) // as a client honouring it does
					}
				})
			}
			continue
		}
		interval := time.Duration(float64(time.Second) / fc.rate[i])
		wg.Go(func() { lb.load(c, n, start.Add(time.Duration(i)*interval/time.Duration(len(names))), interval, dur) })
	}
	if fc.during != nil {
		fc.during(c, lb, start)
	}
	wg.Wait()
	idx := map[string]int{}
	for i, n := range names {
		idx[n] = i
	}
	res := fairResult{got: make([]float64, len(names)), breaches: c.fake.Stats().Breaches}
	var all []time.Time
	from := start.Add(window)
	recs := c.fake.Records()
	for _, r := range recs {
		if r.RateLimited {
			continue
		}
		all = append(all, r.Received)
		if !r.Received.Before(from) && r.Received.Before(start.Add(dur)) {
			res.got[idx[r.User]]++ // while every tenant sends: not the lines' last waiters after
		}
	}
	res.worst, _ = clMaxSliding(all, fc.fake.Window)
	res.fullestTokens, res.emptiestTokens, res.meanTokens = tokenWindows(recs, from, start.Add(dur), window)
	return res
}

// balancer spreads the tests' requests over the nodes it lists, as an L4
// balancer does over the nodes its health checks pass.
type balancer struct {
	mu    sync.Mutex
	nodes []*clNode
	next  int
}

func (b *balancer) pick() *clNode {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	return b.nodes[b.next%len(b.nodes)]
}

func (b *balancer) set(nodes []*clNode) {
	b.mu.Lock()
	b.nodes = nodes
	b.mu.Unlock()
}

// load sends tenant's requests every interval from start for dur, each to
// the next node, at most 256 at once; the answers are not looked at (the
// provider's records are what the tests count).
func (b *balancer) load(c *clCluster, tenant string, start time.Time, interval, dur time.Duration) {
	sem := make(chan struct{}, 256)
	var wg sync.WaitGroup
	for at := start; at.Before(start.Add(dur)); at = at.Add(interval) {
		time.Sleep(time.Until(at)) // pacing, not waiting for a condition
		sem <- struct{}{}
		nd := b.pick()
		wg.Go(func() {
			defer func() { <-sem }()
			_, _ = c.post(nd, tenant, false, nil)
		})
	}
	wg.Wait()
}

// tokenWindows sums the tokens the provider charged in every window that
// starts in [from, to-window], a sixteenth of a window apart: the fullest,
// the emptiest, and the mean a window over [from, to).
func tokenWindows(recs []fakeupstream.Record, from, to time.Time, window time.Duration) (fullest, emptiest, mean int64) {
	sum := func(a, b time.Time) int64 {
		var n int64
		for _, r := range recs {
			if !r.RateLimited && !r.Received.Before(a) && r.Received.Before(b) {
				n += r.TokenCharge
			}
		}
		return n
	}
	emptiest = -1
	for at := from; !at.Add(window).After(to); at = at.Add(window / 16) {
		n := sum(at, at.Add(window))
		fullest = max(fullest, n)
		if emptiest < 0 || n < emptiest {
			emptiest = n
		}
	}
	mean = int64(float64(sum(from, to)) * float64(window) / float64(to.Sub(from)))
	return fullest, emptiest, mean
}

// fairCases are the proof's cases: two tenants on one node and one alone,
// on rpm, tpm and concurrency budgets in turn, with equal weights, with
// weights 1:2:3, with one tenant wanting less than its share, with a batch
// tenant beside interactive ones, and through a scale-up and a drain.
// Every tenant wants more than its share, at twice the provider's limit in
// all, unless said.
func fairCases(window time.Duration) []fairCase {
	two := []string{"n1", "n1", "n2"}
	equal := []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}
	perSec := func(perWindow float64) float64 { return perWindow * float64(time.Second) / float64(window) }
	// The provider counts over the window less a bucket (the leased
	// window's grain: a line's requests go the instant a bucket leaves
	// the window) and clJitter.
	pw := window - window/128 - clJitter
	rpm := func(u *config.Upstream) { u.RPM = 150 }
	return []fairCase{
		{name: "rpm", upstream: rpm, fake: fakeupstream.ProviderLimits{Requests: 150, Window: pw},
			latency: 5 * time.Millisecond, placement: two, rate: []float64{perSec(100), perSec(100), perSec(100)}, want: equal},
		{name: "tpm", upstream: func(u *config.Upstream) { u.TPM = 30000 }, fake: fakeupstream.ProviderLimits{Tokens: 30000, Window: pw},
			// 40 prompt tokens and max_tokens 200 (answers of 20 to 40):
			// about 247 tokens a request, 121 a window.
			latency: 5 * time.Millisecond, placement: two, rate: []float64{perSec(81), perSec(81), perSec(81)}, want: equal,
			body: longChat(200, 40), tokens: 30000},
		{name: "concurrency", upstream: func(u *config.Upstream) { u.Concurrency = 6 }, fake: fakeupstream.ProviderLimits{Concurrency: 6},
			// Each tenant keeps 4 calls of 100 ms busy: 12 for 6.
			latency: 100 * time.Millisecond, placement: two, rate: []float64{40, 40, 40}, want: equal},
		{name: "weights 1:2:3", upstream: rpm, fake: fakeupstream.ProviderLimits{Requests: 150, Window: pw},
			// Their own limits 40, 80 and 120 (their weights), each
			// sending 90 % of it: never refused by their own.
			latency: 5 * time.Millisecond, placement: two, rate: []float64{perSec(36), perSec(72), perSec(108)},
			tune: func(i int, tn *config.Tenant) { tn.RPM = 40 * (i + 1) }, want: []float64{1.0 / 6, 2.0 / 6, 3.0 / 6}},
		{name: "one wants less", upstream: rpm, fake: fakeupstream.ProviderLimits{Requests: 150, Window: pw},
			// 20 a window, beside a tenant on its node and one alone
			// wanting 150 each: it gets its 20, they 65 each.
			latency: 5 * time.Millisecond, placement: two, rate: []float64{perSec(20), perSec(150), perSec(150)},
			want: []float64{20.0 / 150, 65.0 / 150, 65.0 / 150}},
		{name: "batch after interactive", upstream: rpm, fake: fakeupstream.ProviderLimits{Requests: 150, Window: pw},
			// The interactive tenant is alone on its node and wants
			// 100 a window: it gets them; the two batch ones share
			// the 50 left.
			latency: 5 * time.Millisecond, placement: []string{"n1", "n1", "n2"}, rate: []float64{perSec(100), perSec(100), perSec(100)},
			tune: func(i int, tn *config.Tenant) {
				if i < 2 {
					tn.Priority = config.PriorityBatch
				}
			}, want: []float64{25.0 / 150, 25.0 / 150, 100.0 / 150}},
		{name: "closed loop", upstream: rpm, fake: fakeupstream.ProviderLimits{Requests: 150, Window: pw},
			// 16 clients a tenant, each sending its next request when
			// its last is answered, or when a refusal's retry-after-ms
			// has passed; the queue waits a quarter of the window (2 s
			// for a minute's, by default).
			latency: 5 * time.Millisecond, placement: two, clients: 16, wait: window / 4, want: equal, reportOnly: true},
		{name: "scale-up and drain", upstream: rpm, fake: fakeupstream.ProviderLimits{Requests: 150, Window: pw},
			latency: 5 * time.Millisecond, placement: two, rate: []float64{perSec(100), perSec(100), perSec(100)}, want: equal,
			during: func(c *clCluster, lb *balancer, start time.Time) {
				time.Sleep(time.Until(start.Add(3 * window / 2))) // pacing the ring changes
				c.addNode()
				c.waitConverged(10 * time.Second)
				lb.set(c.live())
				time.Sleep(time.Until(start.Add(3 * window)))
				dn := c.byName("n2") // the lone tenant's owner
				dn.gone = true
				lb.set(c.live()) // its /readyz answers 503 as it drains
				if !dn.Drain() {
					c.t.Errorf("drain of n2 cut calls in flight")
				}
				c.waitConverged(10 * time.Second)
			}},
	}
}

// TestClusterFairShares: a provider's limit shared by tenants placed two on
// one node and one on another is divided among the tenants, max-min fair
// by weight, not among the nodes: each tenant within 10 % of its share of
// what the provider admitted (Jain's index over the shares by weight at
// least 0.98), with no breach, and the token limit used at 0.9 or more.
func TestClusterFairShares(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const window = 2 * time.Second
	for _, fc := range fairCases(window) {
		if fc.reportOnly {
			continue
		}
		t.Run(fc.name, func(t *testing.T) {
			res := runFair(t, fc, window, 5*window, true)
			share := res.share()
			t.Logf("admitted after the first window %v, shares %s (want %s); breaches %d; fullest window %d requests; tokens a window: mean %d, emptiest %d, fullest %d",
				res.got, fmtShares(share), fmtShares(fc.want), res.breaches, res.worst, res.meanTokens, res.emptiestTokens, res.fullestTokens)
			if res.breaches != 0 {
				t.Errorf("the provider's limit was breached %d times", res.breaches)
			}
			for i, s := range share {
				if math.Abs(s-fc.want[i]) > 0.1*fc.want[i] {
					t.Errorf("tenant %d (on %s) got %.3f of what the provider admitted, want %.3f ± 10 %%", i, fc.placement[i], s, fc.want[i])
				}
			}
			if j := jain(share, fc.want); j < 0.98 {
				t.Errorf("Jain's index %.3f of the shares by their due, want ≥ 0.98", j)
			}
			if fc.tokens > 0 && float64(res.meanTokens) < 0.9*float64(fc.tokens) {
				t.Errorf("the provider's token limit used at %.2f a window (%d of %d), want ≥ 0.9",
					float64(res.meanTokens)/float64(fc.tokens), res.meanTokens, fc.tokens)
			}
		})
	}
}

// TestFairShareReport prints, for each case, what each tenant got with the
// limit split among the nodes (no Redis: each node's strict share) and
// divided among the tenants (leased from Redis), for the bench report:
//
//	RINGGATE_BENCH_REPORT=1 go test -run FairShareReport -v ./node/
func TestFairShareReport(t *testing.T) {
	if testing.Short() || os.Getenv("RINGGATE_BENCH_REPORT") != "1" {
		t.Skip("set RINGGATE_BENCH_REPORT=1 to run the fair share report")
	}
	const window = 2 * time.Second
	var b strings.Builder
	b.WriteString("| case | each tenant's due | per-node split: got (Jain) | ringgate: got (Jain) | the limit used, split / ringgate |\n| --- | --- | --- | --- | ---: |\n")
	figs := benchout.Figures{}
	for _, fc := range fairCases(window) {
		if fc.during != nil {
			continue // the per-node split has no ring change to go through
		}
		split := runFair(t, fc, window, 5*window, false)
		div := runFair(t, fc, window, 5*window, true)
		used := "–"
		switch {
		case fc.tokens > 0:
			used = fmt.Sprintf("%.2f / %.2f", float64(split.meanTokens)/float64(fc.tokens), float64(div.meanTokens)/float64(fc.tokens))
		case fc.fake.Requests > 0:
			perWindow := func(r fairResult) float64 { return total(r.got) / 4 / float64(fc.fake.Requests) } // 4 windows counted
			used = fmt.Sprintf("%.2f / %.2f", perWindow(split), perWindow(div))
		}
		fmt.Fprintf(&b, "| %s | %s | %s (%.2f) | %s (%.2f) | %s |\n", fc.name, fmtShares(fc.want),
			fmtShares(split.share()), jain(split.share(), fc.want), fmtShares(div.share()), jain(div.share(), fc.want), used)
		key := strings.NewReplacer(" ", "_", ":", "").Replace(fc.name)
		figs["jain_split_"+key], figs["jain_"+key] = jain(split.share(), fc.want), jain(div.share(), fc.want)
	}
	b.WriteString("\nTwo tenants owned by one node and one by another, the fake provider counting; shares of what the provider admitted after the first window of five (2 s windows). Per-node split: three nodes without Redis, each on its strict share (limit / 3). The limit used: what the provider admitted a window (requests, or tokens for tpm) over its limit.\n")
	benchout.Save(t, "fair-share", b.String(), figs)
}

func fmtShares(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, " / ")
}

// longChat makes chat completions of a prompt of words tokens with the
// given max_tokens (none when 0).
func longChat(maxTokens, words int) func(tenant string, stream bool) []byte {
	prompt := strings.Repeat(" the", words)
	return func(tenant string, stream bool) []byte {
		s := ""
		if stream {
			s = `"stream":true,`
		}
		if maxTokens > 0 {
			s += fmt.Sprintf(`"max_tokens":%d,`, maxTokens)
		}
		return []byte(fmt.Sprintf(`{"model":%q,"user":%q,%s"messages":[{"role":"user","content":%q}]}`, clModel, tenant, s, prompt))
	}
}

func mustTokenizer(t *testing.T) *reserve.Tokenizer {
	t.Helper()
	tok, err := reserve.NewTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func total(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}
