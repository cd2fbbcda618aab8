package router

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/handoff"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/ring"
)

// made counts the tenants of the state in force whose core was made.
func made(r *Router) (n int, names []string) {
	for name, t := range r.state.Load().ByName {
		if t.Peek() != nil {
			n++
			names = append(names, name)
		}
	}
	return n, names
}

// A node configured with many tenants makes a tenant's core at its first
// use only: reloads, views, the metrics, the spillover scan and the
// lookups the handoff makes of tenants it never counted make none; a
// request makes its tenant's, and no other.
func TestCoresMadeAtFirstUse(t *testing.T) {
	r, cfg := testRouter(t, Options{})
	for i := range 1000 {
		cfg.Tenants = append(cfg.Tenants, config.Tenant{Name: fmt.Sprintf("t%03d", i), Keys: []string{fmt.Sprintf("k%03d", i)}, RPM: 10, Concurrency: 2})
	}
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Limits.Window *= 2 // rebuckets what exists
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	self := Member{Name: "t", Addr: "127.0.0.1:1"}
	other := Member{Name: "u", Addr: "127.0.0.1:2"}
	r.SetView(View{Ring: ring.New(1, []string{"t", "u"}), Members: []Member{self, other}})
	r.SetView(View{Ring: ring.New(2, []string{"t"}), Members: []Member{self}}) // u gone: the slot pass
	if _, err := r.metrics.Reg.Gather(); err != nil {
		t.Fatal(err)
	}
	r.KickQueues(r.moves.Names())
	for _, name := range r.moves.Names() {
		if r.moves.Counted(name) != nil {
			t.Fatalf("Counted(%s) made a core", name)
		}
	}
	if n, names := made(r); n != 0 {
		t.Fatalf("%d cores made without a request: %v", n, names[:min(n, 10)])
	}

	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(fasthttp.MethodPost)
	ctx.Request.SetRequestURI("/v1/chat/completions")
	ctx.Request.Header.Set("Authorization", "Bearer k007")
	ctx.Request.Header.SetContentType("application/json")
	ctx.Request.SetBodyString(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`)
	r.Handler(&ctx)
	if n, names := made(r); n != 1 || names[0] != "t007" {
		t.Fatalf("after one request of t007: cores %v (status %d %s)", names, ctx.Response.StatusCode(), ctx.Response.Body())
	}
	if r.moves.Counted("t007") == nil || r.moves.Counted("t007") != r.moves.Limiter("t007") {
		t.Fatal("Counted and Limiter disagree on a tenant that has a core")
	}
}

// A core made through a tenant's struct from before a reload (a request
// that started before it) counts on the reload's limits and window, not on
// the struct's: the reload gave the cores made then its config, and one
// made after it must not miss it.
func TestCoreMadeAfterReloadTakesItsConfig(t *testing.T) {
	r, cfg := testRouter(t, Options{})
	cfg.Tenants = []config.Tenant{{Name: "a", Keys: []string{"ka"}, RPM: 10, TPM: 1000, Concurrency: 2}}
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	before := r.state.Load().ByName["a"] // held by a request in flight
	cfg.Tenants[0].RPM, cfg.Tenants[0].Concurrency = 20, 3
	cfg.Limits.Window = 2 * cfg.Limits.Window
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	lim := before.Core().Lim
	if got, want := lim.Limits(), (limiter.Limits{Requests: 20, Tokens: 1000, Concurrency: 3}); got != want {
		t.Errorf("core made through the old struct has limits %+v, want the reload's %+v", got, want)
	}
	if got := lim.Window(); got != cfg.Limits.Window {
		t.Errorf("core made through the old struct counts over %v, want the reload's %v", got, cfg.Limits.Window)
	}
	if got := before.Core().Fb.Share().Window(); got != cfg.Limits.Window {
		t.Errorf("its fallback share counts over %v, want %v", got, cfg.Limits.Window)
	}
	if r.state.Load().ByName["a"].Core() != before.Core() {
		t.Error("the old and the new struct count on different cores")
	}
	// And a reload after the core was made reaches it.
	cfg.Tenants[0].RPM = 30
	cfg.Limits.Window = time.Minute
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if got := lim.Limits().Requests; got != 30 {
		t.Errorf("after a second reload: rpm %d, want 30", got)
	}
	if got := lim.Window(); got != time.Minute {
		t.Errorf("after a second reload: window %v, want 1m", got)
	}
}

// A tenant never counted here and handed over (the first node of a
// cluster hands most of its tenants over as the others join) keeps where
// it went without a core; the core, once made, is frozen for that node,
// and a thaw (the tenant back, nobody having counted it) forgets it.
func TestFrozenWithoutCore(t *testing.T) {
	r, cfg := testRouter(t, Options{})
	for i := range 100 {
		cfg.Tenants = append(cfg.Tenants, config.Tenant{Name: fmt.Sprintf("t%03d", i), Keys: []string{fmt.Sprintf("k%03d", i)}, RPM: 10})
	}
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	now := r.clock()
	for _, name := range r.moves.Names() {
		st, ok := r.moves.Freeze(name, now, "u")
		if !ok || !st.Empty() || st.Requests.Width != int64(cfg.Limits.Window)/limiter.Buckets {
			t.Fatalf("Freeze(%s) = %+v, %v: want an empty state with the window's bucket width", name, st, ok)
		}
	}
	if _, ok := r.moves.Freeze("nobody", now, "u"); ok {
		t.Error("Freeze of an unknown tenant went through")
	}
	if n, _ := made(r); n != 0 {
		t.Fatalf("freezing 100 tenants never counted made %d cores", n)
	}
	if got := r.moves.MovedTo("t001"); got != "u" {
		t.Fatalf("MovedTo(t001) = %q, want u", got)
	}
	if _, d := r.moves.Limiter("t002").Admit(now, 1); !d.Moved || r.moves.Limiter("t002").MovedTo() != "u" {
		t.Fatalf("the core made after the freeze decides (%+v), want Moved to u", d)
	}
	r.moves.Thaw("t003")
	if got := r.moves.MovedTo("t003"); got != "" || r.moves.Counted("t003") != nil {
		t.Fatalf("after Thaw: MovedTo %q, core made %v", got, r.moves.Counted("t003") != nil)
	}
	if _, d := r.moves.Limiter("t003").Admit(now, 1); !d.Allowed {
		t.Fatalf("a thawed tenant's core refuses: %+v", d)
	}
	if n, names := made(r); n != 2 {
		t.Fatalf("cores %v, want t002's and t003's", names)
	}
}

func coreTestNode(t *testing.T, name string, n int) *Router {
	cfg := config.Default()
	cfg.Node.Name = name
	cfg.Upstreams = []config.Upstream{{Name: "up", Kind: config.KindOpenAI, BaseURL: "http://127.0.0.1:1", Models: []string{"gpt-4o"}}}
	for i := range n {
		cfg.Tenants = append(cfg.Tenants, config.Tenant{Name: fmt.Sprintf("t%04d", i), Keys: []string{fmt.Sprintf("k%04d", i)}, RPM: 10, Concurrency: 2})
	}
	r, err := New(Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// coreTestPair is two routers a and b configured with n tenants, with
// their handoff movers joined on an in-memory network.
func coreTestPair(t *testing.T, n int) (ra, rb *Router, ma, mb *handoff.Mover) {
	ra, rb = coreTestNode(t, "a", n), coreTestNode(t, "b", n)
	net := handoff.NewInmemNet()
	ma = handoff.New(handoff.Config{Self: "a", Window: time.Minute}, ra.moves, net.Peers("a"), nil, nil)
	mb = handoff.New(handoff.Config{Self: "b", Window: time.Minute}, rb.moves, net.Peers("b"), nil, nil)
	net.Join("a", ma)
	net.Join("b", mb)
	return ra, rb, ma, mb
}

// A join moves tenants nobody ever sent a request for: the node that
// loses them keeps where they went without a core, the node that gains
// them takes their empty states without making one.
func TestJoinMakesNoCores(t *testing.T) {
	ra, rb, ma, mb := coreTestPair(t, 1000)
	ma1 := Member{Name: "a", Addr: "127.0.0.1:1"}
	mb1 := Member{Name: "b", Addr: "127.0.0.1:2"}
	r1 := ring.New(1, []string{"a"})
	r2 := ring.New(2, []string{"a", "b"})
	ra.SetView(View{Ring: r1, Members: []Member{ma1}})
	if c, _ := made(ra); c != 0 {
		t.Fatalf("a: %d cores before the join", c)
	}
	ra.SetView(View{Ring: r2, Members: []Member{ma1, mb1}})
	lostA, _, _ := ma.Change(r1, r2, nil)
	rb.SetView(View{Ring: r2, Members: []Member{ma1, mb1}})
	_, gainedB, arr := mb.Change(ring.New(0, nil), r2, nil)
	ca, _ := made(ra)
	cb, _ := made(rb)
	t.Logf("join: a lost %d, made %d cores; b gained %d (%v), made %d cores", len(lostA), ca, len(gainedB), arr.Counts(), cb)
	if len(lostA) == 0 || len(gainedB) != len(lostA) {
		t.Fatalf("a lost %d, b gained %d: want the same tenants, some", len(lostA), len(gainedB))
	}
	if ca+cb > 0 {
		t.Errorf("a made %d cores and b %d for tenants nobody ever counted", ca, cb)
	}
	for _, name := range lostA {
		if to := ra.moves.MovedTo(name); to != "b" {
			t.Fatalf("a says %s went to %q, want b", name, to)
		}
	}
}

// Two nodes starting together: each asks the other for the tenants it
// gains; the other never owned them and makes no core to say so.
func TestClusterStartMakesNoCores(t *testing.T) {
	ra, rb, ma, mb := coreTestPair(t, 1000)
	ms := []Member{{Name: "a", Addr: "127.0.0.1:1"}, {Name: "b", Addr: "127.0.0.1:2"}}
	r2 := ring.New(1, []string{"a", "b"})
	ra.SetView(View{Ring: r2, Members: ms})
	rb.SetView(View{Ring: r2, Members: ms})
	_, ga, aa := ma.Change(ring.New(0, nil), r2, nil)
	_, gb, ab := mb.Change(ring.New(0, nil), r2, nil)
	ca, _ := made(ra)
	cb, _ := made(rb)
	t.Logf("cold start: a gained %d %v, %d cores; b gained %d %v, %d cores", len(ga), aa.Counts(), ca, len(gb), ab.Counts(), cb)
	if ca+cb > 0 {
		t.Errorf("%d cores made on a cluster start with no request", ca+cb)
	}
}
