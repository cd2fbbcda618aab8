package tenant

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/router/internal/metrics"
)

// What an empty queue adds to a decision: the check for waiters before it
// and the Kick after the call ends, against the plain decision, in the
// same run.
func BenchmarkDecisionEmptyQueue(b *testing.B) {
	lim := limiter.NewTenant(limiter.Limits{Requests: 1 << 40, Tokens: 1 << 40, Concurrency: 1 << 30}, time.Minute, 10*time.Minute)
	t := &Tenant{ref: &coreRef{}}
	t.ref.Store(&Core{Lim: lim, Queue: &queue.Queue{}})
	t.waits[queue.Interactive] = 2 * time.Second
	now := time.Now().UnixNano()
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			tk, _ := lim.Admit(now, 100)
			lim.Finish(now, &tk, 100)
		}
	})
	b.Run("empty-queue", func(b *testing.B) {
		for b.Loop() {
			if t.Core().Queue.Waiting() > 0 {
				b.Fatal("waiters")
			}
			tk, _ := lim.Admit(now, 100)
			lim.Finish(now, &tk, 100)
			t.Core().Queue.Kick()
		}
	})
}

// build puts a state of cfg in force on cs, over the one in force.
func build(t *testing.T, st *atomic.Pointer[State], cs *Cores, m *metrics.Metrics, cfg *config.Config, now int64) *State {
	t.Helper()
	s, err := Build(cfg, st.Load(), m, cs)
	if err != nil {
		t.Fatal(err)
	}
	cs.Install(s, now)
	return s
}

// A core is made at first use, kept by a reload that keeps its name, and
// put back by one that restores a name a reload removed; a tenant frozen
// before its first use makes no core, and the core made later is frozen
// for the node it went to.
func TestCoresKeptAcrossReloads(t *testing.T) {
	clk := clockwork.NewFakeClock()
	now := func() int64 { return clk.Now().UnixNano() }
	var st atomic.Pointer[State]
	cs := NewCores(&st, Hooks{Spills: new(atomic.Int64)}, now, clk)
	m := metrics.New()
	cfg := config.Default()
	cfg.Teams = []config.Team{{Name: "t", RPM: 10}}
	cfg.Tenants = []config.Tenant{{Name: "a", Keys: []string{"ka"}, RPM: 5, Team: "t"}, {Name: "b", Keys: []string{"kb"}, RPM: 5}}
	s := build(t, &st, cs, m, cfg, now())
	a := s.ByName["a"]
	if a.Peek() != nil || a.Team != s.ByName[TeamEntity("t")] {
		t.Fatalf("a: core %v, team %v", a.Peek(), a.Team)
	}
	c := a.Core()
	if s = build(t, &st, cs, m, cfg, now()); s.ByName["a"].Peek() != c {
		t.Fatal("a reload that keeps a lost its core")
	}
	kept := *cfg
	kept.Tenants = cfg.Tenants[1:]
	build(t, &st, cs, m, &kept, now())
	if s = build(t, &st, cs, m, cfg, now()); s.ByName["a"].Peek() != c {
		t.Fatal("a reload that restores a did not put its core back")
	}
	b := s.ByName["b"]
	cs.Freeze(b, now(), "n2")
	if b.Peek() != nil || b.MovedTo() != "n2" {
		t.Fatalf("Freeze of b: core %v, moved to %q", b.Peek(), b.MovedTo())
	}
	if to := b.Core().Lim.MovedTo(); to != "n2" {
		t.Fatalf("b's core made after its Freeze moved to %q", to)
	}
}
