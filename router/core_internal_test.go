package router

import (
	"fmt"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/ring"
)

// made counts the tenants of the state in force whose core was made.
func made(r *Router) (n int, names []string) {
	for name, t := range r.state.Load().byName {
		if t.peek() != nil {
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
	if _, err := r.metrics.reg.Gather(); err != nil {
		t.Fatal(err)
	}
	r.KickQueues(r.Names())
	for _, name := range r.Names() {
		if r.Counted(name) != nil {
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
	if r.Counted("t007") == nil || r.Counted("t007") != r.Limiter("t007") {
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
	before := r.state.Load().byName["a"] // held by a request in flight
	cfg.Tenants[0].RPM, cfg.Tenants[0].Concurrency = 20, 3
	cfg.Limits.Window = 2 * cfg.Limits.Window
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	lim := before.c().lim
	if got, want := lim.Limits(), (limiter.Limits{Requests: 20, Tokens: 1000, Concurrency: 3}); got != want {
		t.Errorf("core made through the old struct has limits %+v, want the reload's %+v", got, want)
	}
	if got := lim.Window(); got != cfg.Limits.Window {
		t.Errorf("core made through the old struct counts over %v, want the reload's %v", got, cfg.Limits.Window)
	}
	if got := before.c().fb.share().Window(); got != cfg.Limits.Window {
		t.Errorf("its fallback share counts over %v, want %v", got, cfg.Limits.Window)
	}
	if r.state.Load().byName["a"].c() != before.c() {
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
