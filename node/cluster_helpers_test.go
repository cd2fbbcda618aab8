package node

// Helpers for the multi-node tests in cluster_test.go: a fake provider and N
// real nodes on loopback that gossip with LANFast timings, a plain net/http
// client in front of them, per-node JSON logs the tests can search, and
// polls (never bare sleeps) for ring convergence.
//
// Every name here starts with "cl" (or is startCluster) so as not to collide
// with the other test files of the package.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/internal/audit"
	"github.com/ringgate/ringgate/reserve"
)

const (
	clModel = "gpt-4o-mini"
	// clReqTimeout bounds every client call: a hang fails the test instead
	// of stalling it.
	clReqTimeout = 10 * time.Second
	// clPollEvery is the period of every poll.
	clPollEvery = 20 * time.Millisecond
	// clDrainGrace is the nodes' DrainGrace.
	clDrainGrace = 200 * time.Millisecond
)

// clLog is a thread-safe buffer of one node's JSON log lines.
type clLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *clLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *clLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// entries parses the log lines (slog's JSON handler writes one per line);
// a line that does not parse is kept as {"unparsed": line}.
func (l *clLog) entries() []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(l.String()))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			m = map[string]any{"unparsed": string(line)}
		}
		out = append(out, m)
	}
	return out
}

// find returns the entries whose fields equal every field of match (values
// compared as fmt %v strings).
func (l *clLog) find(match map[string]any) []map[string]any {
	var out []map[string]any
	for _, e := range l.entries() {
		ok := true
		for k, v := range match {
			if got, has := e[k]; !has || fmt.Sprint(got) != fmt.Sprint(v) {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, e)
		}
	}
	return out
}

// clNode is one node of a test cluster.
type clNode struct {
	*Node
	log  *clLog
	gone bool // drained or closed by the test
}

// clCluster is a fake provider and the nodes in front of it.
type clCluster struct {
	t       *testing.T
	fake    *fakeupstream.Server
	upAddr  string
	secret  []byte
	window  time.Duration
	tenants []config.Tenant
	nodes   []*clNode
	hc      *http.Client
	opts    clOptions
	// body, if set, makes the chat completion post sends (clChatBody
	// otherwise).
	body func(tenant string, stream bool) []byte

	decidedMu sync.Mutex
	decidedAt map[string][]time.Time // admissions the nodes decided, by tenant
}

// decide is every node's OnAdmit: the admissions as decided, stamped by
// the clock the nodes share.
func (c *clCluster) decide(tenant string, at int64, _ []byte) {
	c.decidedMu.Lock()
	defer c.decidedMu.Unlock()
	if c.decidedAt == nil {
		c.decidedAt = map[string][]time.Time{}
	}
	c.decidedAt[tenant] = append(c.decidedAt[tenant], time.Unix(0, at))
}

// decided returns tenant's admissions as the nodes decided them, sorted.
func (c *clCluster) decided(tenant string) []time.Time {
	c.decidedMu.Lock()
	defer c.decidedMu.Unlock()
	ts := slices.Clone(c.decidedAt[tenant])
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	return ts
}

// clOptions are the optional settings of startClusterWith; the zero value
// is what startCluster uses (no Redis, the default timings).
type clOptions struct {
	// Redis, if set, is the address of the Redis every node snapshots to.
	Redis            string
	SnapshotInterval time.Duration // redis.snapshot_interval (0: config default)
	HandoffWait      time.Duration // redis.handoff_wait (0: config default)
	RedisTimeout     time.Duration // redis.timeout (0: config default)
	// ForwardConnectTimeout overrides cluster.forward_connect_timeout
	// (0: 15 ms).
	ForwardConnectTimeout time.Duration
	// Listen, if set, makes each node's HTTP listener (Options.Listener),
	// given the node's name.
	Listen func(name string) (net.Listener, error)
	// FirstSeeds are tried before the cluster's own seed when a node
	// joins (a seed that is slow or silent).
	FirstSeeds []string
	// Upstream, if set, changes the upstream every node is configured
	// with (its provider limits).
	Upstream func(*config.Upstream)
	// SpilloverRPS is limits.spillover_rps (0: never).
	SpilloverRPS int
	// Queue, if set, is the [queue] table; without it refusals answer at
	// once (the tests of the limits count them).
	Queue *config.Queue
	// Teams are the [[teams]] the tenants may name.
	Teams []config.Team
	// Source, if set, is each node's config source (Options.Source),
	// given the config the node started with.
	Source func(started *config.Config) (*config.Config, error)
}

// clTenant is a tenant with the given requests per window and token and
// concurrency limits too large to matter.
func clTenant(name string, rpm int) config.Tenant {
	return config.Tenant{
		Name: name, Keys: []string{"sk-" + name},
		RPM: rpm, TPM: 1 << 30, Concurrency: 1 << 20,
		Priority: config.PriorityInteractive,
	}
}

// startCluster starts the fake provider and n nodes ("n1".."nN") sharing one
// cluster secret, nodes 2..N joining the first; it waits for the ring to
// converge. Everything stops when t ends.
func startCluster(t *testing.T, n int, window time.Duration, tenants ...config.Tenant) *clCluster {
	t.Helper()
	return startClusterWith(t, n, window, clOptions{}, tenants...)
}

// startClusterWith is startCluster with options (Redis snapshots, timings).
func startClusterWith(t *testing.T, n int, window time.Duration, opts clOptions, tenants ...config.Tenant) *clCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("cluster test (seconds of gossip and load): not in -short")
	}
	tok, err := reserve.NewTokenizer()
	if err != nil {
		t.Fatalf("tokenizer: %v", err)
	}
	// Encodings load lazily on first use (~50 ms under -race): load the
	// model's now rather than in the middle of the first requests.
	tok.Count(clModel, "warm up")
	fake := fakeupstream.New(fakeupstream.Options{
		CountTokens: tok.Count, CompletionMin: 20, CompletionMax: 40, Latency: 5 * time.Millisecond,
	})
	upAddr, err := fake.Start("127.0.0.1:0")
	if err != nil {
		t.Fatalf("start fake upstream: %v", err)
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 32, IdleConnTimeout: 30 * time.Second}
	c := &clCluster{
		t: t, fake: fake, upAddr: upAddr, secret: secret, window: window, tenants: tenants,
		hc:   &http.Client{Transport: tr, Timeout: clReqTimeout},
		opts: opts,
	}
	// Cleanups run last-registered first: nodes close before the fake.
	t.Cleanup(func() {
		if err := fake.Close(); err != nil {
			t.Errorf("close fake upstream: %v", err)
		}
	})
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		for _, nd := range c.nodes {
			if !nd.gone {
				_ = nd.Close()
				nd.gone = true
			}
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			c.dumpLogs()
		}
	})
	for range n {
		c.addNode()
	}
	took := c.waitConverged(10 * time.Second)
	t.Logf("cluster of %d converged %v after the last start", n, took.Round(time.Millisecond))
	return c
}

// addNode starts one more node, joining the first live node.
func (c *clCluster) addNode() *clNode {
	c.t.Helper()
	tok, _ := reserve.NewTokenizer()
	cfg := config.Default()
	cfg.Node.Name = fmt.Sprintf("n%d", len(c.nodes)+1)
	cfg.Node.Listen = "127.0.0.1:0"
	cfg.Node.Gossip = "127.0.0.1:0"
	cfg.Node.DrainTimeout = 5 * time.Second
	for _, nd := range c.nodes {
		if !nd.gone {
			cfg.Node.Join = append(slices.Clone(c.opts.FirstSeeds), nd.GossipAddr())
			break
		}
	}
	cfg.Cluster.Secret = c.secret
	cfg.Cluster.ForwardConnectTimeout = 15 * time.Millisecond
	if c.opts.ForwardConnectTimeout > 0 {
		cfg.Cluster.ForwardConnectTimeout = c.opts.ForwardConnectTimeout
	}
	if c.opts.Redis != "" {
		cfg.Redis.Addr = c.opts.Redis
		if c.opts.SnapshotInterval > 0 {
			cfg.Redis.SnapshotInterval = c.opts.SnapshotInterval
		}
		if c.opts.HandoffWait > 0 {
			cfg.Redis.HandoffWait = c.opts.HandoffWait
		}
		if c.opts.RedisTimeout > 0 {
			cfg.Redis.Timeout = c.opts.RedisTimeout
		}
	}
	cfg.Cluster.HopSkew = 5 * time.Second
	cfg.Limits.Window = c.window
	cfg.Limits.SpilloverRPS = c.opts.SpilloverRPS
	cfg.Queue.InteractiveWait, cfg.Queue.BatchWait = 0, 0
	if c.opts.Queue != nil {
		cfg.Queue = *c.opts.Queue
	}
	cfg.Upstreams = []config.Upstream{{
		Name: "openai", Kind: config.KindOpenAI, BaseURL: "http://" + c.upAddr,
		Models:  []string{clModel},
		Timeout: 10 * time.Second, ConnectTimeout: time.Second, StreamIdleTimeout: 10 * time.Second,
		AnthropicVersion: config.DefaultAnthropicVersion,
	}}
	if c.opts.Upstream != nil {
		c.opts.Upstream(&cfg.Upstreams[0])
	}
	cfg.Tenants = slices.Clone(c.tenants)
	cfg.Teams = slices.Clone(c.opts.Teams)
	lg := &clLog{}
	var ln net.Listener
	if c.opts.Listen != nil {
		var err error
		if ln, err = c.opts.Listen(cfg.Node.Name); err != nil {
			c.t.Fatalf("listen for %s: %v", cfg.Node.Name, err)
		}
	}
	var source func() (*config.Config, error)
	if c.opts.Source != nil {
		source = func() (*config.Config, error) { return c.opts.Source(cfg) }
	}
	nd, err := Start(cfg, Options{
		Tokenizer:  tok,
		Logger:     slog.New(slog.NewJSONHandler(lg, nil)),
		DrainGrace: clDrainGrace,
		Listener:   ln,
		Source:     source,
		OnAdmit:    c.decide,
	})
	if err != nil {
		c.t.Fatalf("start %s: %v", cfg.Node.Name, err)
	}
	cn := &clNode{Node: nd, log: lg}
	c.nodes = append(c.nodes, cn)
	return cn
}

// live returns the nodes the test has neither drained nor closed.
func (c *clCluster) live() []*clNode {
	var out []*clNode
	for _, nd := range c.nodes {
		if !nd.gone {
			out = append(out, nd)
		}
	}
	return out
}

func (c *clCluster) byName(name string) *clNode {
	for _, nd := range c.nodes {
		if nd.Name() == name {
			return nd
		}
	}
	return nil
}

func (c *clCluster) tenantNames() []string {
	names := make([]string, len(c.tenants))
	for i, tc := range c.tenants {
		names[i] = tc.Name
	}
	return names
}

// converged reports whether every live node's ring has exactly the live
// nodes as members, all agree on the owner of every tenant, and every
// node's router serves the ring the node holds (GET /cluster); otherwise
// it says why not.
func (c *clCluster) converged() (bool, string) {
	live := c.live()
	want := make([]string, len(live))
	for i, nd := range live {
		want[i] = nd.Name()
	}
	sort.Strings(want)
	var first *clNode
	for _, nd := range live {
		r := nd.Ring()
		if r == nil {
			return false, nd.Name() + ": no ring"
		}
		got := slices.Clone(r.Members())
		sort.Strings(got)
		if !slices.Equal(got, want) {
			return false, fmt.Sprintf("%s: ring v%d members %v, want %v", nd.Name(), r.Version(), got, want)
		}
		if first == nil {
			first = nd
			continue
		}
		fr := first.Ring()
		for _, tn := range c.tenantNames() {
			a, _ := fr.Owner(tn)
			b, _ := r.Owner(tn)
			if a != b {
				return false, fmt.Sprintf("tenant %s: owner %s on %s, %s on %s", tn, a, first.Name(), b, nd.Name())
			}
		}
	}
	for _, nd := range live {
		v, err := c.routerRingVersion(nd)
		if err != nil {
			return false, nd.Name() + ": GET /cluster: " + err.Error()
		}
		if rv := nd.Ring().Version(); v != rv {
			return false, fmt.Sprintf("%s: router serves ring v%d, node holds v%d", nd.Name(), v, rv)
		}
	}
	return true, ""
}

func (c *clCluster) routerRingVersion(nd *clNode) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+nd.Addr()+"/cluster", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var v struct {
		RingVersion uint64 `json:"ring_version"`
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return 0, err
	}
	return v.RingVersion, nil
}

// waitConverged polls until converged, failing the test after timeout; it
// returns how long it waited.
func (c *clCluster) waitConverged(timeout time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		ok, why := c.converged()
		if ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("ring did not converge within %v: %s", timeout, why)
		}
		time.Sleep(clPollEvery)
	}
}

// edge is a live node other than the one named owner.
func (c *clCluster) edge(owner string) *clNode {
	c.t.Helper()
	for _, nd := range c.live() {
		if nd.Name() != owner {
			return nd
		}
	}
	c.t.Fatalf("no node besides %s", owner)
	return nil
}

// owner is the tenant's owner according to the first live node (call it
// once converged).
func (c *clCluster) owner(tenant string) string {
	c.t.Helper()
	o, ok := c.live()[0].Ring().Owner(tenant)
	if !ok {
		c.t.Fatalf("no owner for %s", tenant)
	}
	return o
}

// records returns the fake provider's records for one tenant, in arrival
// order.
func (c *clCluster) records(tenant string) []fakeupstream.Record {
	var out []fakeupstream.Record
	for _, r := range c.fake.Records() {
		if r.User == tenant {
			out = append(out, r)
		}
	}
	return out
}

func (c *clCluster) dumpLogs() {
	const maxLines = 300
	for _, nd := range c.nodes {
		lines := strings.Split(strings.TrimRight(nd.log.String(), "\n"), "\n")
		skipped := 0
		if len(lines) > maxLines {
			skipped = len(lines) - maxLines
			lines = lines[skipped:]
		}
		c.t.Logf("---- log of %s (%d earlier lines skipped) ----\n%s", nd.Name(), skipped, strings.Join(lines, "\n"))
	}
}

// clReply is what a client saw of one answer.
type clReply struct {
	status int
	node   string // x-ringgate-node
	header http.Header
	body   []byte
}

func (r clReply) String() string {
	b := r.body
	if len(b) > 300 {
		b = b[:300]
	}
	return fmt.Sprintf("%d from %q: %s", r.status, r.node, b)
}

func clChatBody(tenant string, stream bool) []byte {
	s := ""
	if stream {
		s = `"stream":true,`
	}
	return []byte(`{"model":"` + clModel + `","user":"` + tenant + `",` + s +
		`"max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`)
}

// post sends a chat completion for tenant to nd with extra headers and reads
// the whole answer.
func (c *clCluster) post(nd *clNode, tenant string, stream bool, hdr map[string]string) (clReply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), clReqTimeout)
	defer cancel()
	mk := clChatBody
	if c.body != nil {
		mk = c.body
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+nd.Addr()+"/v1/chat/completions",
		bytes.NewReader(mk(tenant, stream)))
	if err != nil {
		return clReply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-"+tenant)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return clReply{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return clReply{}, fmt.Errorf("read answer (status %d): %w", resp.StatusCode, err)
	}
	return clReply{status: resp.StatusCode, node: resp.Header.Get("x-ringgate-node"), header: resp.Header, body: body}, nil
}

// getStatus GETs path on nd and returns the status code.
func (c *clCluster) getStatus(nd *clNode, path string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+nd.Addr()+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// clMaxSliding returns the largest number of times inside any interval
// (at-span, at] with at one of the times, and that at.
func clMaxSliding(times []time.Time, span time.Duration) (worst int, at time.Time) {
	w := audit.MaxIn(times, span)
	return w.Count, w.Last
}

// clReceived returns the Received times of records.
func clReceived(recs []fakeupstream.Record) []time.Time {
	out := make([]time.Time, len(recs))
	for i, r := range recs {
		out[i] = r.Received
	}
	return out
}

// clCountIn counts times in [from, to).
func clCountIn(times []time.Time, from, to time.Time) int {
	return audit.CountIn(times, from, to)
}

// metric reads one unlabelled counter or gauge from nd's /metrics (-1 when
// it is not there).
func (c *clCluster) metric(nd *clNode, name string) float64 {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+nd.Addr()+"/metrics", nil)
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("metrics of %s: %v", nd.Name(), err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}
