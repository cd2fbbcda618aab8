package router

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/admit"
	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/reply"
	"github.com/ringgate/ringgate/router/internal/tenant"
	"github.com/ringgate/ringgate/upstream"
)

// The tenant's part of a decision, admission and finish, as the router
// makes it: a tenant alone, and one with a model limit and a team in
// play (three limiters, all charged or none), in the same run.
func BenchmarkDecisionLevels(b *testing.B) {
	now := time.Now().UnixNano()
	r, cfg := testRouter(b, Options{Clock: stoppedClock{clockwork.NewRealClock(), time.Unix(0, now)}})
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
			t := st.ByName[name]
			c := &call{r: r, t: t, lim: t.Core().Lim, req: upstream.Request{Model: "gpt-4o"}}
			c.res.Total = 500
			if !r.setLevels(c) {
				b.Fatal("no levels")
			}
			if want := map[string]int{"plain": 0, "leveled": 2}[name]; c.levels.Len() != want {
				b.Fatalf("%d levels, want %d", c.levels.Len(), want)
			}
			b.ReportAllocs()
			for b.Loop() {
				if o := r.decide(c); o.Verdict != admit.Taken {
					b.Fatalf("refused: %+v", o)
				}
				c.lim.Finish(now, &c.tk, 420)
				r.finishLevels(c, 420)
			}
		})
	}
}

// A level that refuses takes back what the tenant and the levels before
// it were charged: nothing stays in any window.
func TestLevelsAllOrNone(t *testing.T) {
	now := time.Now().UnixNano()
	r, cfg := testRouter(t, Options{Clock: newSetClock(now)})
	cfg.Teams = []config.Team{{Name: "research", RPM: 1}}
	cfg.Tenants = []config.Tenant{{Name: "a", Keys: []string{"k"}, RPM: 10, TPM: 1000, Concurrency: 5,
		Team: "research", ModelLimits: []config.ModelLimit{{Model: "gpt-4o", RPM: 5}}}}
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	tn := r.state.Load().ByName["a"]
	try := func() (admit.Outcome, *call) {
		c := &call{r: r, t: tn, lim: tn.Core().Lim, req: upstream.Request{Model: "gpt-4o"}}
		c.res.Total = 100
		r.setLevels(c)
		return r.decide(c), c
	}
	if o, _ := try(); o.Verdict != admit.Taken {
		t.Fatalf("the first request was not taken: %+v", o)
	}
	o, c := try()
	if d := c.refusal(); o.Verdict != admit.Refused || o.At != atLevels || d.Limited != limiter.Requests || c.refusedBy != "team research" {
		t.Fatalf("second: %+v, %+v by %q; want refused on the team's requests", o, d, c.refusedBy)
	}
	for _, e := range []*tenant.Tenant{tn, tn.Models["gpt-4o"], tn.Team} {
		if u := e.Core().Lim.Usage(now); u.Requests != 1 || u.Tokens != 100 || u.InFlight != 1 {
			t.Errorf("%s holds %+v, want only the first request", e.Name, u)
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

// An edge seeds its fallback shares from what the owner's answers say the
// tenant and each level used: for a tenant with levels, the owner says so
// in levelsUsedHeader, never through the x-ratelimit headers (they report
// the tightest level: a model limit at 5 of 5 would have seeded the
// tenant's share with 5 while it had used 990 of 1000).
func TestEdgeSeesEachLevelsUsage(t *testing.T) {
	r, cfg := testRouter(t, Options{})
	cfg.Teams = []config.Team{{Name: "research", RPM: 2000}}
	cfg.Tenants = []config.Tenant{{Name: "a", Keys: []string{"k"}, RPM: 1000,
		Team: "research", ModelLimits: []config.ModelLimit{{Model: "gpt-4o", RPM: 5}}}}
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	tn := r.state.Load().ByName["a"]
	c := &call{r: r, t: tn, lim: tn.Core().Lim, req: upstream.Request{Model: "gpt-4o"}}
	r.setLevels(c)
	// The call admitted as the model's 5th request and the team's 1500th.
	now := r.clock()
	for range 4 {
		tn.Models["gpt-4o"].Core().Lim.Admit(now, 0)
	}
	for range 1499 {
		tn.Team.Core().Lim.Admit(now, 0)
	}
	if o := r.decide(c); o.Verdict != admit.Taken {
		t.Fatalf("refused: %+v", o)
	}
	var h fasthttp.ResponseHeader
	reply.SetRateHeaders(&h, &limiter.Decision{LimitRequests: 5, RemainingRequests: 0}) // the tightest: the model's
	setLevelsUsed(&h, c, [2]int64{990, 0})
	var again fasthttp.ResponseHeader
	setLevelsUsed(&again, c, [2]int64{990, 0}) // the header's own buffer grown once
	if n := testing.AllocsPerRun(100, func() { setLevelsUsed(&again, c, [2]int64{990, 0}) }); n != 0 {
		t.Errorf("setLevelsUsed allocates %v times per answer", n)
	}
	r.fb.NoteUsage(tn, &h)
	for e, want := range map[*tenant.Tenant]int64{tn: 990, tn.Models["gpt-4o"]: 5, tn.Team: 1500} {
		if at, got, _ := e.Core().Seen.Last(); got != want || at == 0 {
			t.Errorf("%s seen using %d, want %d", e.Name, got, want)
		}
	}
	// Without the header (an owner that predates it), nothing is learnt:
	// the tightest level's figures are not the tenant's.
	var bare fasthttp.ResponseHeader
	reply.SetRateHeaders(&bare, &limiter.Decision{LimitRequests: 5, RemainingRequests: 0})
	r.fb.NoteUsage(tn, &bare)
	if _, got, _ := tn.Core().Seen.Last(); got != 990 {
		t.Errorf("a bare answer changed the tenant's seen usage to %d", got)
	}
}

// BenchmarkStateMemory: the heap a node's state takes per configured
// tenant (limits on all three dimensions), before any request
// (heap-bytes/tenant), and what a tenant's core adds once it is served
// (core-bytes/tenant).
func BenchmarkStateMemory(b *testing.B) {
	const n = 20_000
	for b.Loop() {
		cfg := config.Default()
		cfg.Node.Name = "t"
		cfg.Upstreams = []config.Upstream{{Name: "up", Kind: config.KindOpenAI, BaseURL: "http://127.0.0.1:1"}}
		cfg.Tenants = make([]config.Tenant, n)
		for i := range cfg.Tenants {
			name := fmt.Sprintf("tenant-%06d", i)
			cfg.Tenants[i] = config.Tenant{Name: name, Keys: []string{"k-" + name}, RPM: 600, TPM: 100000, Concurrency: 10}
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		r, err := New(Options{Config: cfg})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-bytes/tenant")
		// What a tenant costs once it is served: its core.
		for _, name := range r.moves.Names() {
			r.moves.Limiter(name)
		}
		var served runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&served)
		b.ReportMetric(float64(served.HeapAlloc-after.HeapAlloc)/n, "core-bytes/tenant")
		runtime.KeepAlive(r)
	}
}
