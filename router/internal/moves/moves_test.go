package moves

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/deltaid"
	"github.com/ringgate/ringgate/router/internal/metrics"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// fakeView is a view with every tenant owned by owner ("": no ring).
type fakeView struct {
	owner string
	addrs map[string]string
	names []string
}

func (v *fakeView) Owner(string) string { return v.owner }

func (v *fakeView) Addr(node string) (string, bool) {
	a, ok := v.addrs[node]
	return a, ok
}

func (v *fakeView) Names() []string { return v.names }

func newView(owner string, members ...string) *fakeView {
	v := &fakeView{owner: owner, addrs: map[string]string{}, names: []string{}}
	for _, m := range members {
		v.addrs[m] = m + ":1"
		v.names = append(v.names, m)
	}
	return v
}

type fakeCluster struct {
	v        *fakeView
	departed map[string]bool
}

func (c *fakeCluster) View() View { return c.v }

func (c *fakeCluster) Await(_ time.Duration, ok func(View) bool) View {
	ok(c.v)
	return c.v
}

func (c *fakeCluster) Departed(node string) bool { return c.departed[node] }

// fakeCaller records the calls and answers status.
type fakeCaller struct {
	mu     sync.Mutex
	status int
	to     []string
	msgs   []deltaMsg
}

func (p *fakeCaller) Call(_ View, _, to, _ string, msg any, _ int, _ time.Duration) (int, []byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.to = append(p.to, to)
	if m, ok := msg.(deltaMsg); ok {
		p.msgs = append(p.msgs, m)
	}
	return p.status, nil, nil
}

func (p *fakeCaller) Signed() bool { return true }

// testNode is a Node for node "self" of a cluster with the tenant acme,
// owned by owner in the view of the members.
func testNode(t *testing.T, owner string, members ...string) (*Node, *fakeCluster, *fakeCaller) {
	t.Helper()
	cfg := config.Default()
	cfg.Node.Name = "self"
	cfg.Upstreams = []config.Upstream{{Name: "up", Kind: config.KindOpenAI, BaseURL: "http://127.0.0.1:1", Models: []string{"gpt-4o"}}}
	cfg.Tenants = []config.Tenant{{Name: "acme", Keys: []string{"k"}, RPM: 100, Concurrency: 2}}
	clk := clockwork.NewFakeClockAt(time.Unix(1_764_000_000, 0))
	clock := func() int64 { return clk.Now().UnixNano() }
	var st atomic.Pointer[tenant.State]
	var n *Node
	cores := tenant.NewCores(&st, tenant.Hooks{Spills: &atomic.Int64{}, Changed: func(name string) { n.NoteChanged(name) }}, clock, clk)
	m := metrics.New()
	s, err := tenant.Build(cfg, nil, m, cores)
	if err != nil {
		t.Fatal(err)
	}
	cores.Install(s, clock())
	c := &fakeCluster{v: newView(owner, members...), departed: map[string]bool{}}
	p := &fakeCaller{status: 204}
	n = New(Config{Self: "self", Clustered: true, State: &st, Cores: cores, Reloads: &sync.Mutex{},
		Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: m, IDs: deltaid.New(),
		Cluster: c, Peers: p, Quit: make(chan struct{}), MaxHops: 3, CatchUp: time.Millisecond,
		Ringless: func() bool { return false }, Deciding: func() bool { return true },
		Applied: func(*tenant.Tenant, []limiter.Delta) {}})
	return n, c, p
}

// slot is the delta of one call admitted (holding a slot) on some node.
func slot(now int64) limiter.Delta {
	mirror := limiter.NewTenant(limiter.Limits{}, time.Minute, time.Minute)
	tk, _ := mirror.Admit(now, 10)
	return limiter.DeltaOf(&tk)
}

// A peer's deltas for a tenant this node owns are applied; a malformed
// body and an unknown tenant are refused.
func TestReceive(t *testing.T) {
	n, _, _ := testNode(t, "self", "self", "b")
	now := n.clock()
	if _, err := n.Receive([]byte("{"), "b", 1); !errors.Is(err, ErrMalformed) {
		t.Fatalf("malformed: %v", err)
	}
	if name, err := n.Receive([]byte(`{"tenant":"nobody"}`), "b", 1); !errors.Is(err, ErrUnknownTenant) || name != "nobody" {
		t.Fatalf("unknown tenant: %q %v", name, err)
	}
	body := []byte(`{"tenant":"acme","deltas":[` + deltaJSON(t, slot(now)) + `]}`)
	if _, err := n.Receive(body, "b", 1); err != nil {
		t.Fatal(err)
	}
	if u := n.Limiter("acme").Usage(now); u.Requests != 1 || u.InFlight != 1 {
		t.Fatalf("usage %+v, want b's call counted", u)
	}
	if got := n.Changed(); len(got) != 1 || got[0] != "acme" {
		t.Fatalf("changed %v, want [acme]", got)
	}
}

// A report for a tenant another node owns is sent to that node, as this
// node's.
func TestReportSentToOwner(t *testing.T) {
	n, _, p := testNode(t, "b", "self", "b")
	n.Report(n.cfg.State.Load().ByName["acme"], slot(n.clock()))
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.mu.Lock()
		sent := len(p.msgs)
		if sent > 0 && (p.to[0] != "b" || p.msgs[0].From != "self" || p.msgs[0].Tenant != "acme") {
			t.Errorf("sent to %s: %+v", p.to[0], p.msgs[0])
		}
		p.mu.Unlock()
		if sent > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing sent to the owner")
		}
		time.Sleep(time.Millisecond)
	}
}

// Deltas that reach a node holding the tenant for a handoff wait for its
// release; a slot of a node that departed is dropped.
func TestHeldUntilRelease(t *testing.T) {
	n, c, _ := testNode(t, "self", "self", "b")
	now := n.clock()
	tn := n.cfg.State.Load().ByName["acme"]
	if !n.Hold("acme", time.Second) || !n.Held("acme") {
		t.Fatal("not held")
	}
	n.Apply(tn, now, "b", []limiter.Delta{slot(now)})
	if u := n.Limiter("acme").Usage(now); u.Requests != 0 {
		t.Fatalf("applied while held: %+v", u)
	}
	n.Release("acme")
	if u := n.Limiter("acme").Usage(now); u.Requests != 1 || u.InFlight != 1 || n.Held("acme") {
		t.Fatalf("after release: %+v, held %v", u, n.Held("acme"))
	}
	c.v = newView("self", "self")
	c.departed["b"] = true
	n.Apply(tn, now, "b", []limiter.Delta{slot(now)})
	if u := n.Limiter("acme").Usage(now); u.Requests != 2 || u.InFlight != 0 {
		t.Fatalf("after a departed node's report: %+v, want its slots dropped", u)
	}
}

// Others are the members but this node; none without a view.
func TestOthers(t *testing.T) {
	n, c, _ := testNode(t, "", "a", "self", "b")
	if got := n.Others(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("others %v", got)
	}
	c.v = &fakeView{}
	if got := n.Others(); got != nil {
		t.Fatalf("others %v without a view", got)
	}
}

func deltaJSON(t *testing.T, d limiter.Delta) string {
	t.Helper()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
