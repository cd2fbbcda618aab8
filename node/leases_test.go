package node

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/internal/redistest"
	"github.com/ringgate/ringgate/reserve"
)

// The provider's own limits hold for the whole cluster: three nodes lease
// them from a real Redis, tenants with no limits of their own send twice
// what the provider allows, spread over every node. The fake provider
// enforces its true limit (on a window shortened by the loopback jitter,
// see clJitter) and counts what breaches it: nothing may, and the cluster
// must use at least 90% of the limit in every window after the first.
func TestClusterProviderLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const window = 2 * time.Second
	cases := []struct {
		name     string
		upstream func(*config.Upstream)
		fake     fakeupstream.ProviderLimits
		limit    int // requests per window the provider allows
		latency  time.Duration
		inFlight int // calls at once, when the limit is concurrency
	}{
		{name: "rpm", upstream: func(u *config.Upstream) { u.RPM = 150 },
			fake: fakeupstream.ProviderLimits{Requests: 150}, limit: 150, latency: 5 * time.Millisecond},
		// Each request: "hi" + framing (7 tokens) + max_tokens 50 = 57
		// at the provider's count; 150 requests' worth.
		{name: "tpm", upstream: func(u *config.Upstream) { u.TPM = 150 * 57 },
			fake: fakeupstream.ProviderLimits{Tokens: 150 * 57}, limit: 150, latency: 5 * time.Millisecond},
		{name: "model rpm", upstream: func(u *config.Upstream) {
			u.ModelLimits = []config.ModelLimit{{Model: clModel, RPM: 150}}
		}, fake: fakeupstream.ProviderLimits{Models: map[string]fakeupstream.ModelLimits{clModel: {Requests: 150}}}, limit: 150, latency: 5 * time.Millisecond},
		{name: "concurrency", upstream: func(u *config.Upstream) { u.Concurrency = 6 },
			fake: fakeupstream.ProviderLimits{Concurrency: 6}, latency: 100 * time.Millisecond, inFlight: 6},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			tc.fake.Window = window - clJitter
			c, tenants := startProviderCluster(t, srv, window, tc.upstream, tc.fake, tc.latency)

			// Twice the provider's limit, over every node: for the
			// concurrency case, twice the calls it can run at once.
			perTenant := window * time.Duration(len(tenants)) / time.Duration(2*max(tc.limit, 1))
			if tc.inFlight > 0 {
				perTenant = tc.latency * time.Duration(len(tenants)) / time.Duration(2*tc.inFlight)
			}
			start := time.Now().Add(50 * time.Millisecond)
			dur := 4 * window
			res := c.loadAll(tenants, start, perTenant, dur)

			// Every node shows its lease in /upstreams.
			for _, nd := range c.live() {
				var v struct {
					Node      string `json:"node"`
					Upstreams []struct {
						Name   string `json:"name"`
						Budget *struct {
							Grants uint64 `json:"grants"`
						} `json:"budget"`
						Models map[string]struct {
							Grants uint64 `json:"grants"`
						} `json:"models"`
					} `json:"upstreams"`
				}
				resp, err := c.hc.Get("http://" + nd.Addr() + "/upstreams")
				if err != nil {
					t.Fatal(err)
				}
				err = json.NewDecoder(resp.Body).Decode(&v)
				resp.Body.Close()
				if err != nil || v.Node != nd.Name() || len(v.Upstreams) != 1 {
					t.Fatalf("/upstreams of %s: %+v, %v", nd.Name(), v, err)
				}
				grants := v.Upstreams[0].Models[clModel].Grants
				if b := v.Upstreams[0].Budget; b != nil {
					grants = b.Grants
				}
				if grants == 0 && tc.inFlight == 0 { // slots alone take no blocks
					t.Errorf("/upstreams of %s shows no grant: %+v", nd.Name(), v)
				}
			}

			stats := c.fake.Stats()
			recs := c.fake.Records()
			codes := answersOf(t, res)
			t.Logf("sent %d: answers %v; the provider admitted %d, breaches %d, max %d in flight",
				len(res), codes, stats.Admitted, stats.Breaches, stats.MaxConcurrent)
			if stats.Breaches != 0 {
				t.Errorf("the provider's limit was breached %d times", stats.Breaches)
			}
			if tc.inFlight > 0 {
				if stats.MaxConcurrent > tc.inFlight {
					t.Errorf("%d calls at once at the provider, limit %d", stats.MaxConcurrent, tc.inFlight)
				}
				// A call holds its slot for the fake's latency and the
				// loopback round trip: the ideal is inFlight per latency.
				ideal := float64(tc.inFlight) * float64(dur) / float64(tc.latency)
				used := float64(stats.Admitted) / ideal
				t.Logf("slots used %.0f%% of the ideal %.0f calls", 100*used, ideal)
				if used < 0.6 {
					t.Errorf("the cluster ran %d calls, %.0f%% of the %.0f the provider's slots allow", stats.Admitted, 100*used, ideal)
				}
				return
			}
			var got []time.Time
			for _, r := range recs {
				if !r.RateLimited {
					got = append(got, r.Received)
				}
			}
			worst, _ := clMaxSliding(got, window-clJitter)
			least := -1
			for from := start.Add(window); !from.Add(window).After(start.Add(dur)); from = from.Add(window / 8) {
				n := clCountIn(got, from, from.Add(window))
				if least < 0 || n < least {
					least = n
				}
			}
			t.Logf("fullest window %d, emptiest after the first %d, of %d", worst, least, tc.limit)
			if worst > tc.limit {
				t.Errorf("%d requests reached the provider within %v, limit %d", worst, window-clJitter, tc.limit)
			}
			// Measured 93-95 % on a quiet machine; the bar
			// leaves room for a loaded CI box, whose scheduling delays
			// shift the admissions the window audit counts.
			if least < tc.limit*85/100 {
				t.Errorf("only %d of %d used in a window", least, tc.limit)
			}
		})
	}
}

// loadAll runs clLoad for every tenant at once, each sending every
// interval (staggered), over every live node, and returns all results.
func (c *clCluster) loadAll(tenants []config.Tenant, start time.Time, interval, dur time.Duration) []clResult {
	var mu sync.Mutex
	var res []clResult
	var wg sync.WaitGroup
	for i, tn := range tenants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := c.clLoad(tn.Name, c.live(), i, start.Add(time.Duration(i)*interval/time.Duration(len(tenants))), interval, dur, 64)
			mu.Lock()
			res = append(res, r...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return res
}

// Redis stopped (and restarted empty), and separately Redis hung (SIGSTOP),
// in the middle of a load at twice the provider's limit: nothing breaches
// the provider's limit, nobody gets a 5xx, and leasing resumes once Redis
// is back. The degraded period's figures are in the output.
func TestClusterProviderLimitRedisDown(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const window = 2 * time.Second
	const limit = 150
	cases := []struct {
		name       string
		down, back func(*redistest.Server)
	}{
		{"stopped, restarted empty", (*redistest.Server).Stop, (*redistest.Server).Restart},
		{"hung", func(s *redistest.Server) { s.Pause(0) }, (*redistest.Server).Resume},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			c, tenants := startProviderCluster(t, srv, window, func(u *config.Upstream) { u.RPM = limit },
				fakeupstream.ProviderLimits{Window: window - clJitter, Requests: limit}, 5*time.Millisecond)

			start := time.Now().Add(50 * time.Millisecond)
			downAt, backAt := start.Add(window+window/2), start.Add(3*window)
			end := start.Add(6 * window)
			go func() {
				time.Sleep(time.Until(downAt)) // the schedule of the fault, not a wait for a condition
				tc.down(srv)
				time.Sleep(time.Until(backAt))
				tc.back(srv)
			}()
			perTenant := window * time.Duration(len(tenants)) / (2 * limit)
			res := c.loadAll(tenants, start, perTenant, end.Sub(start))

			stats := c.fake.Stats()
			codes := answersOf(t, res)
			var got []time.Time
			for _, r := range c.fake.Records() {
				if !r.RateLimited {
					got = append(got, r.Received)
				}
			}
			before := clCountIn(got, start, downAt)
			during := clCountIn(got, downAt, backAt)
			after := clCountIn(got, backAt, end)
			worst, _ := clMaxSliding(got, window-clJitter)
			t.Logf("answers %v; provider admitted %d (breaches %d): %d in the %v before, %d in the %v down, %d in the %v after; fullest window %d of %d",
				codes, stats.Admitted, stats.Breaches, before, downAt.Sub(start), during, backAt.Sub(downAt), after, end.Sub(backAt), worst, limit)
			if stats.Breaches != 0 || worst > limit {
				t.Errorf("the provider's limit was breached %d times; fullest window %d of %d", stats.Breaches, worst, limit)
			}
			// What Redis down costs a request: the answers' latency before
			// and while it is down (figures, not a verdict: timing never
			// decides a pass).
			p99 := func(from, to time.Time) time.Duration {
				var ds []time.Duration
				for _, r := range res {
					if r.err == nil && !r.sent.Before(from) && r.sent.Before(to) {
						ds = append(ds, r.took)
					}
				}
				slices.Sort(ds)
				if len(ds) == 0 {
					return 0
				}
				return ds[len(ds)*99/100]
			}
			t.Logf("answer p99: %v before, %v while Redis was down, %v after",
				p99(start, downAt).Round(100*time.Microsecond), p99(downAt, backAt).Round(100*time.Microsecond), p99(backAt, end).Round(100*time.Microsecond))
			// Leasing resumed: the last window is used as before.
			if last := clCountIn(got, end.Add(-window), end); last < limit*8/10 {
				t.Errorf("the last window used %d of %d: leasing did not resume", last, limit)
			}
		})
	}
}

// The provider allows half of what is configured (its key is shared): the
// cluster learns it from the provider's rate-limit headers and shrinks its
// budget. After the first window at most 2 % of what reaches the provider
// is refused by it, and at least 80 % of its true limit is used.
func TestClusterLearnsProviderLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const window = 2 * time.Second
	const configured, truth = 300, 150
	srv := redistest.Start(t)
	c, tenants := startProviderCluster(t, srv, window, func(u *config.Upstream) { u.RPM = configured },
		fakeupstream.ProviderLimits{Window: window, Requests: truth}, 5*time.Millisecond)

	start := time.Now().Add(50 * time.Millisecond)
	dur := 5 * window
	perTenant := window * time.Duration(len(tenants)) / (2 * configured)
	res := c.loadAll(tenants, start, perTenant, dur)
	codes := answersOf(t, res)
	var reached, refused int
	var got []time.Time
	for _, r := range c.fake.Records() {
		if r.Received.Before(start.Add(window)) {
			continue
		}
		reached++
		if r.RateLimited {
			refused++
		} else {
			got = append(got, r.Received)
		}
	}
	least := -1
	for from := start.Add(window); !from.Add(window).After(start.Add(dur)); from = from.Add(window / 8) {
		n := clCountIn(got, from, from.Add(window))
		if least < 0 || n < least {
			least = n
		}
	}
	t.Logf("answers %v; after the first window %d reached the provider, %d refused by it (%.1f%%); emptiest window %d of the true %d",
		codes, reached, refused, 100*float64(refused)/float64(max(1, reached)), least, truth)
	if float64(refused) > 0.02*float64(reached) {
		t.Errorf("the provider refused %d of %d after the first window, want <= 2%%", refused, reached)
	}
	if least < truth*8/10 {
		t.Errorf("only %d of the true %d used in a window", least, truth)
	}
}

// answersOf counts the answers by status and fails the test on a transport
// error, a 5xx or a 429 without Retry-After.
func answersOf(t *testing.T, res []clResult) map[int]int {
	t.Helper()
	codes := map[int]int{}
	for _, r := range res {
		if r.err != nil {
			t.Errorf("%s via %s: %v", r.tenant, r.via, r.err)
			continue
		}
		codes[r.rep.status]++
		switch {
		case r.rep.status >= 500:
			t.Errorf("%s via %s at %s: %v", r.tenant, r.via, r.sent.Format("15:04:05.000"), r.rep)
		case r.rep.status == 429 && r.rep.header.Get("Retry-After") == "":
			t.Errorf("429 without Retry-After: %v", r.rep)
		}
	}
	return codes
}

// auditRedisTimeout is redis.timeout in the tests that audit how much of a
// provider's limit the leases use. Under -race on CI's 2 shared cores a
// Redis call sometimes takes longer than the default 15 ms: the budgets
// then count the store down and fall to their strict share for half a
// second or more (store_down in the logs of runs that failed), a window
// the audit saw 1-27 of 150 used in. Redis down or hung is made so on
// purpose where it is tested (TestClusterProviderLimitRedisDown).
const auditRedisTimeout = 100 * time.Millisecond

// startProviderCluster is 3 nodes leasing from srv (redis.timeout
// auditRedisTimeout), the upstream set by tune, six tenants with no
// limits of their own, and the fake provider enforcing limits and
// answering after latency.
func startProviderCluster(t *testing.T, srv *redistest.Server, window time.Duration, tune func(*config.Upstream),
	limits fakeupstream.ProviderLimits, latency time.Duration) (*clCluster, []config.Tenant) {
	t.Helper()
	return startProviderClusterWith(t, window, clOptions{Redis: srv.Addr(), Upstream: tune, RedisTimeout: auditRedisTimeout}, limits, latency)
}

// startProviderClusterWith is startProviderCluster with the nodes' options.
func startProviderClusterWith(t *testing.T, window time.Duration, opts clOptions,
	limits fakeupstream.ProviderLimits, latency time.Duration) (*clCluster, []config.Tenant) {
	t.Helper()
	tenants := make([]config.Tenant, 6)
	for i := range tenants {
		tenants[i] = clTenant(fmt.Sprintf("free-%d", i), 1<<30)
	}
	c := startClusterWith(t, 3, window, opts, tenants...)
	tok, _ := reserve.NewTokenizer()
	c.fake.SetOptions(fakeupstream.Options{CountTokens: tok.Count, CompletionMin: 20, CompletionMax: 40,
		Latency: latency, Limits: limits})
	c.fake.Reset()
	return c, tenants
}
