package fallback

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/cluster"
	"github.com/ringgate/ringgate/router/internal/deltaid"
	"github.com/ringgate/ringgate/router/internal/metrics"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// mover takes every delta: no node behind it.
type mover struct{}

func (mover) Report(*tenant.Tenant, limiter.Delta)                       {}
func (mover) Deliver(*tenant.Tenant, string, []limiter.Delta, int) error { return nil }

// testEdge puts cfg in force on a node of its own, n1, on the clock now,
// and makes its Edge, logging to log.
func testEdge(t *testing.T, cfg *config.Config, now *atomic.Int64, log *slog.Logger) (*Edge, *tenant.State) {
	t.Helper()
	var st atomic.Pointer[tenant.State]
	m := metrics.New()
	cs := tenant.NewCores(&st, tenant.Hooks{Spills: new(atomic.Int64)}, now.Load, clockwork.NewFakeClock())
	s, err := tenant.Build(cfg, nil, m, cs)
	if err != nil {
		t.Fatal(err)
	}
	cs.Install(s, now.Load())
	e := New(Config{Self: "n1", Clock: now.Load, Window: func() time.Duration { return cfg.Limits.Window },
		View: func() *cluster.Lookup { return nil }, IDs: deltaid.New(), Moves: mover{}, Metrics: m, Log: log})
	return e, s
}

// TestFallbackFlappingSeedsOnce: an owner that answers now and then while
// it goes down (a server closing its connections one by one, a lossy
// link) ends and restarts a tenant's fallback episode many times. Each
// restart seeds the share with the owner's usage again; the seed must
// replace the last one, not pile onto it, or a few flaps leave the share
// spent for a window while the cluster admits a fraction of the limit.
// The restarts are logged once a second, not each.
func TestFallbackFlappingSeedsOnce(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	var logs bytes.Buffer
	cfg := config.Default()
	cfg.Limits.Window = 60 * time.Second
	cfg.Tenants = []config.Tenant{{Name: "a", Keys: []string{"ka"}, RPM: 600}}
	r, st := testEdge(t, cfg, &now, slog.New(slog.NewJSONHandler(&logs, nil)))
	tn := st.ByName["a"]
	const members = 3
	v := cluster.Build(cluster.View{Members: make([]cluster.Member, members)}, "n1")

	// The owner's last snapshot, 10 s old: 300 of 600 in the window, 10
	// a second. 1/3 of it is this node's seed, plus the 10 s since at the
	// snapshot's peak rate.
	owner := limiter.NewTenant(limiter.Limits{Requests: 600}, cfg.Limits.Window, time.Minute)
	for i := range 300 {
		owner.Admit(now.Load()-int64(40*time.Second)+int64(i)*int64(100*time.Millisecond), 0)
	}
	snap := owner.Export(now.Load() - int64(10*time.Second))
	r.SetSeed(func(string) (limiter.State, bool) { return snap, true })

	fl, open := r.Limiter(tn, v, "o1")
	if !open {
		t.Fatal("share closed")
	}
	first := fl.Usage(now.Load()).Requests
	if first <= 110 || first >= 200 {
		t.Fatalf("seeded share holds %d, want 100 (1/3 of the snapshot) and a gap well below the share", first)
	}
	for i := range 50 {
		now.Add(int64(20 * time.Millisecond))
		r.End(tn, "o1") // the owner answered
		if i%10 == 0 {
			fl.Admit(now.Load(), 0) // one admitted on the share in between
		}
		r.Limiter(tn, v, "o1") // and failed again
	}
	if got, max := fl.Usage(now.Load()).Requests, first+5+10; got > max {
		t.Errorf("after 50 restarts of the episode the share holds %d, want the one seed (%d) and the 5 it admitted (up to %d with a second's more gap)", got, first, max)
	}
	starts, ends := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) != nil || e["msg"] != "fallback" {
			continue
		}
		switch e["phase"] {
		case "start":
			starts++
		case "end":
			ends++
		}
	}
	if starts > 2 || ends > starts {
		t.Errorf("%d start and %d end lines for 51 episodes in 1 s, want at most 2 and an end only for a start logged", starts, ends)
	}

	// A newer snapshot (the owner wrote one: alive, and its link to this
	// node lossy) makes a restart's seed anew, in place of the last one:
	// 30 s on, the first 150 of the 300 have left the window.
	now.Add(int64(30 * time.Second))
	held := fl.Usage(now.Load()).Requests
	snap = owner.Export(now.Load() - int64(100*time.Millisecond))
	r.End(tn, "o1")
	r.Limiter(tn, v, "o1")
	if got := fl.Usage(now.Load()).Requests; got > held || got < 40 {
		t.Errorf("after a newer snapshot the share holds %d, want its seed (about 1/3 of the 150 left) in place of the last (%d held before)", got, held)
	}

	// Another owner: its episode is seeded on its own, on top.
	r.End(tn, "o1")
	before := fl.Usage(now.Load()).Requests
	r.Limiter(tn, v, "o2")
	if got := fl.Usage(now.Load()).Requests; got < before+50 {
		t.Errorf("an episode for another owner left the share at %d, want its own seed on top of %d", got, before)
	}
}
