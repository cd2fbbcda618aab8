package router

import (
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/upstream"
)

// The tenant's part of a decision, admission and finish, as the router
// makes it: a tenant alone, and one with a model limit and a team in
// play (three limiters, all charged or none), in the same run.
func BenchmarkDecisionLevels(b *testing.B) {
	now := time.Now().UnixNano()
	r, cfg := testRouter(b, Options{Clock: func() int64 { return now }})
	cfg.Teams = []config.Team{{Name: "research", RPM: 1 << 40, TPM: 1 << 50, Concurrency: 1 << 30}}
	plain := config.Tenant{Name: "plain", Keys: []string{"k1"}, RPM: 1 << 40, TPM: 1 << 50, Concurrency: 1 << 30}
	leveled := config.Tenant{Name: "leveled", Keys: []string{"k2"}, RPM: 1 << 40, TPM: 1 << 50, Concurrency: 1 << 30,
		Team: "research", ModelLimits: []config.ModelLimit{{Model: "gpt-4o", RPM: 1 << 40, TPM: 1 << 50}}}
	cfg.Tenants = []config.Tenant{plain, leveled}
	if err := r.Reload(cfg); err != nil {
		b.Fatal(err)
	}
	st := r.state.Load()
	for _, name := range []string{"plain", "leveled"} {
		b.Run(name, func(b *testing.B) {
			t := st.byName[name]
			c := &call{t: t, lim: t.lim, req: upstream.Request{Model: "gpt-4o"}}
			c.res.Total = 500
			if !r.setLevels(c) {
				b.Fatal("no levels")
			}
			if want := map[string]int{"plain": 0, "leveled": 2}[name]; c.nLevels != want {
				b.Fatalf("%d levels, want %d", c.nLevels, want)
			}
			b.ReportAllocs()
			for b.Loop() {
				var d limiter.Decision
				c.tk, d = c.lim.Admit(now, 500)
				if ok, _, _ := r.admitLevels(c, &d); !ok || !d.Allowed {
					b.Fatal("refused")
				}
				c.lim.Finish(now, &c.tk, 420)
				r.finishLevels(c, 420)
			}
		})
	}
}

// A level that refuses takes back what the tenant and the levels before
// it were charged: nothing stays in any window.
func TestAdmitLevelsAllOrNone(t *testing.T) {
	now := time.Now().UnixNano()
	r, cfg := testRouter(t, Options{Clock: func() int64 { return now }})
	cfg.Teams = []config.Team{{Name: "research", RPM: 1}}
	cfg.Tenants = []config.Tenant{{Name: "a", Keys: []string{"k"}, RPM: 10, TPM: 1000, Concurrency: 5,
		Team: "research", ModelLimits: []config.ModelLimit{{Model: "gpt-4o", RPM: 5}}}}
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	tn := r.state.Load().byName["a"]
	admit := func() (bool, limiter.Decision, *call) {
		c := &call{t: tn, lim: tn.lim, req: upstream.Request{Model: "gpt-4o"}}
		c.res.Total = 100
		r.setLevels(c)
		var d limiter.Decision
		c.tk, d = c.lim.Admit(now, 100)
		if !d.Allowed {
			t.Fatalf("the tenant refused: %+v", d)
		}
		ok, ld, _ := r.admitLevels(c, &d)
		if !ok {
			d = ld
		}
		return ok, d, c
	}
	if ok, _, _ := admit(); !ok {
		t.Fatal("the first request was refused")
	}
	ok, d, c := admit()
	if ok || d.Limited != limiter.Requests || c.refusedBy != "team research" {
		t.Fatalf("second: ok %v, %+v by %q; want refused on the team's requests", ok, d, c.refusedBy)
	}
	for _, e := range []*tenant{tn, tn.models["gpt-4o"], tn.team} {
		if u := e.lim.Usage(now); u.Requests != 1 || u.Tokens != 100 || u.InFlight != 1 {
			t.Errorf("%s holds %+v, want only the first request", e.name, u)
		}
	}
}

// testRouter is a router of one upstream (nothing listens there) and no
// tenants, with o's options; reload the config it returns, changed.
func testRouter(tb testing.TB, o Options) (*Router, *config.Config) {
	tb.Helper()
	cfg := config.Default()
	cfg.Node.Name = "t"
	cfg.Upstreams = []config.Upstream{{Name: "up", Kind: config.KindOpenAI, BaseURL: "http://127.0.0.1:1", Models: []string{"gpt-4o"}}}
	o.Config = cfg
	r, err := New(o)
	if err != nil {
		tb.Fatal(err)
	}
	c := *cfg
	return r, &c
}
