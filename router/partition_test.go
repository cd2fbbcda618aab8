package router

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/internal/knownlimit"
	"github.com/ringgate/ringgate/reserve"
	"github.com/ringgate/ringgate/ring"
	"github.com/ringgate/ringgate/router/internal/away"
)

// partCluster is three routers a, b, o on loopback in front of one fake
// provider, and a tenant the ring {a, b, o} gives to o.
type partCluster struct {
	r      map[string]*Router
	addr   map[string]string
	tenant string
	fake   *fakeupstream.Server
	hc     *http.Client
	ring   *ring.Ring
}

func newPartCluster(t *testing.T, rpm int, window time.Duration) *partCluster {
	t.Helper()
	tok, err := reserve.NewTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	fake, upAddr := startFake(t, fakeupstream.Options{CountTokens: tok.Count, CompletionMin: 5, CompletionMax: 5})
	rg := ring.New(1, []string{"a", "b", "o"})
	tenant := ""
	for i := 0; tenant == ""; i++ {
		if ow, _ := rg.Owner(fmt.Sprintf("t%d", i)); ow == "o" {
			tenant = fmt.Sprintf("t%d", i)
		}
	}
	secret := bytes.Repeat([]byte{7}, 32)
	c := &partCluster{r: map[string]*Router{}, addr: map[string]string{}, tenant: tenant, fake: fake,
		hc: &http.Client{Timeout: 10 * time.Second}, ring: rg}
	for _, name := range []string{"a", "b", "o"} {
		cfg := config.Default()
		cfg.Node.Name = name
		cfg.Node.Gossip = "127.0.0.1:0"
		cfg.Cluster.Secret = secret
		cfg.Cluster.HopSkew = 5 * time.Second
		cfg.Limits.Window = window
		// No queueing: refusals answer at once, so what is admitted during
		// the flood is admitted within it.
		cfg.Queue.InteractiveWait, cfg.Queue.BatchWait = 0, 0
		cfg.Upstreams = []config.Upstream{{
			Name: "openai", Kind: config.KindOpenAI, BaseURL: "http://" + upAddr, Models: []string{"gpt-4o-mini"},
			Timeout: 10 * time.Second, ConnectTimeout: time.Second, StreamIdleTimeout: 10 * time.Second,
			AnthropicVersion: config.DefaultAnthropicVersion,
		}}
		cfg.Tenants = []config.Tenant{{Name: tenant, Keys: []string{"sk-" + tenant}, RPM: rpm, TPM: 1 << 30,
			Concurrency: 1000, Priority: config.PriorityInteractive}}
		r, err := New(Options{Config: cfg, Tokenizer: tok, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		c.r[name] = r
		c.addr[name] = serveRouter(t, r)
	}
	return c
}

func (c *partCluster) post(t *testing.T, node string) int {
	t.Helper()
	return c.postWith(t, node, nil)
}

// postWith is post with extra request headers.
func (c *partCluster) postWith(t *testing.T, node string, extra map[string]string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body := `{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.addr[node]+"/v1/chat/completions", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk-"+c.tenant)
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// flood sends requests through every node in nodes, sequentially per node,
// for d, and returns the 200s per node.
func (c *partCluster) flood(t *testing.T, nodes []string, d time.Duration) map[string]int {
	var mu sync.Mutex
	ok := map[string]int{}
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				if c.post(t, n) == http.StatusOK {
					mu.Lock()
					ok[n]++
					mu.Unlock()
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	return ok
}

// Partitions. The split brain is a known limit (docs/limits.md):
// its test reproduces it and runs only with RINGGATE_KNOWN_LIMITS=1.

// TestAsymmetricPartitionOwnerKeepsToItsPart: the owner o is alive
// (gossip says so: the view keeps 3 members) and serves the clients the
// load balancer sends it, but the two other members cannot reach its HTTP
// port (an asymmetric partition: a firewall rule between the nodes, a
// wrong advertised address). Each edge enforces its share, limit/3, and
// its reports never reach o. The edges name o in their gossip metadata
// (here: o's view says so, as node.publish makes it), and o keeps to the
// third left: together they stay within the limit. Without it, the
// cluster admitted limit + 2 × limit/3 in every window, for as long as the
// partition lasted (50 of 30).
func TestAsymmetricPartitionOwnerKeepsToItsPart(t *testing.T) {
	if testing.Short() {
		t.Skip("windows of load on a partitioned cluster: not in -short")
	}
	const rpm = 30
	window := 2 * time.Second
	c := newPartCluster(t, rpm, window)
	members := func(oAddr string, cannotReachO bool) []Member {
		return []Member{{Name: "a", Addr: c.addr["a"], State: "active", CannotReachSelf: cannotReachO},
			{Name: "b", Addr: c.addr["b"], State: "active", CannotReachSelf: cannotReachO},
			{Name: "o", Addr: oAddr, State: "active"}}
	}
	// a and b cannot reach o's HTTP port (refused) and say so.
	dead := closedPort(t)
	var told []string
	var mu sync.Mutex
	c.r["a"].SetCannotReachHook(func(owners []string) {
		mu.Lock()
		told = owners
		mu.Unlock()
	})
	c.r["o"].SetView(View{Ring: c.ring, Members: members(c.addr["o"], true)})
	c.r["a"].SetView(View{Ring: c.ring, Members: members(dead, false)})
	c.r["b"].SetView(View{Ring: c.ring, Members: members(dead, false)})

	// The edges' first requests start their episodes (seeded as if o had
	// spent the whole window: nothing known); one window later the shares
	// are open.
	c.post(t, "a")
	c.post(t, "b")
	if !poll(2*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Equal(told, []string{"o"})
	}) {
		t.Fatalf("a falling back on o named %v in its metadata, want [o]", told)
	}
	time.Sleep(window + 200*time.Millisecond)

	bound := rpm // the limit itself: o's part and the shares add up to it
	for round := range 2 {
		before := len(c.fake.Records())
		ok := c.flood(t, []string{"a", "b", "o"}, window/2)
		total := ok["a"] + ok["b"] + ok["o"]
		reached := len(c.fake.Records()) - before
		t.Logf("window %d: admitted a=%d b=%d o=%d, total %d, provider saw %d; limit %d", round, ok["a"], ok["b"], ok["o"], total, reached, rpm)
		if total > bound || reached > bound {
			t.Errorf("window %d: the cluster admitted %d (provider %d) of a limit of %d", round, total, reached, rpm)
		}
		if ok["o"] == 0 || ok["a"] == 0 {
			t.Errorf("window %d: the owner or an edge admitted nothing (o=%d a=%d): each must keep its part", round, ok["o"], ok["a"])
		}
		// Past away.NamedFor without a request, within the window: a
		// still names o, its reports of what it admitted undelivered.
		time.Sleep(away.NamedFor + 500*time.Millisecond)
		mu.Lock()
		if !slices.Equal(told, []string{"o"}) {
			t.Errorf("%v after window %d, with reports for o undelivered, a names %v, want [o]", away.NamedFor+500*time.Millisecond, round, told)
		}
		mu.Unlock()
		time.Sleep(window - away.NamedFor)
	}

	// Reachable again right after a fell back once more: a's reports reach
	// o, and a stops naming it once away.NamedFor has passed, not a
	// window after its last fallback.
	c.post(t, "a")
	fellBack := time.Now()
	c.r["a"].SetView(View{Ring: c.ring, Members: members(c.addr["o"], false)})
	c.post(t, "a")
	if !poll(3*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(told) == 0
	}) {
		t.Errorf("a still names %v after o answered again", told)
	}
	took := time.Since(fellBack)
	t.Logf("a stopped naming o %v after its last fallback on it", took.Round(time.Millisecond))
	if took > away.NamedFor+2*away.UnreachableTick+200*time.Millisecond {
		t.Errorf("a named o %v after its last fallback, its reports delivered: want about %v, not a window (%v)", took, away.NamedFor, window)
	}
}

// TestKnownLimitSplitBrain: a full partition {a, b} | {o}. Gossip
// (TestPartitionHeals) has each side drop the other after failure
// detection: o's view is {o}, a's and b's {a, b}. There is no quorum: each
// side builds a ring of its own members and owns every tenant on it, each
// with the whole limit (on a and b after the conservative window a
// takeover without state gives). The views below are the ones gossip
// produces in TestPartitionHeals.
func TestKnownLimitSplitBrain(t *testing.T) {
	knownlimit.Only(t)
	const rpm = 30
	window := 2 * time.Second
	c := newPartCluster(t, rpm, window)
	ab := ring.New(2, []string{"a", "b"})
	alone := ring.New(2, []string{"o"})
	c.r["o"].SetView(View{Ring: alone, Members: []Member{{Name: "o", Addr: c.addr["o"], State: "active"}}})
	side := []Member{{Name: "a", Addr: c.addr["a"], State: "active"}, {Name: "b", Addr: c.addr["b"], State: "active"}}
	c.r["a"].SetView(View{Ring: ab, Members: side})
	c.r["b"].SetView(View{Ring: ab, Members: side})

	ok := c.flood(t, []string{"a", "b", "o"}, window/2)
	total := ok["a"] + ok["b"] + ok["o"]
	t.Logf("split brain, within half a window: admitted a=%d b=%d o=%d, total %d of limit %d", ok["a"], ok["b"], ok["o"], total, rpm)
	if total > rpm+rpm/3 {
		t.Errorf("the cluster admitted %d of a limit of %d in half a window", total, rpm)
	}
}

func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
