package levels

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ringgate/ringgate/admit"
	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/away"
	"github.com/ringgate/ringgate/router/internal/metrics"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// node is a standalone node: it owns every level, and nothing is away.
type node struct{ now int64 }

func (n *node) Away(string) bool                                     { return false }
func (n *node) Share(*tenant.Tenant) (*limiter.Tenant, bool)         { return nil, false }
func (n *node) Clock() int64                                         { return n.now }
func (n *node) Report(*tenant.Tenant, limiter.Delta)                 {}
func (n *node) Admitted(*tenant.Tenant, *limiter.Ticket) *away.Entry { return nil }
func (n *node) Finished(*tenant.Tenant, *away.Entry, limiter.Delta)  {}

func (n *node) Admit(lim *limiter.Tenant, _ bool, now, cost int64, tk *limiter.Ticket, d *limiter.Decision) {
	lim.AdmitTo(now, cost, tk, d)
}

// state puts cfg in force on a node of its own, at now.
func state(t *testing.T, cfg *config.Config, now int64) *atomic.Pointer[tenant.State] {
	t.Helper()
	var st atomic.Pointer[tenant.State]
	cs := tenant.NewCores(&st, tenant.Hooks{Spills: new(atomic.Int64)}, func() int64 { return now }, clockwork.NewFakeClock())
	s, err := tenant.Build(cfg, nil, metrics.New(), cs)
	if err != nil {
		t.Fatal(err)
	}
	cs.Install(s, now)
	return &st
}

// A call of one member of a big team makes its own core and its team's,
// not every member's (the members' lines are told only if they exist).
func TestTeamCallMakesNoMemberCores(t *testing.T) {
	cfg := config.Default()
	cfg.Teams = []config.Team{{Name: "big", RPM: 100000}}
	for i := range 1000 {
		cfg.Tenants = append(cfg.Tenants, config.Tenant{Name: fmt.Sprintf("t%04d", i), Keys: []string{fmt.Sprintf("k%04d", i)}, RPM: 10, Concurrency: 2, Team: "big"})
	}
	n := &node{now: time.Now().UnixNano()}
	st := state(t, cfg, n.now)
	tn := st.Load().ByName["t0007"]
	var s Set
	if !s.Choose(tn, "gpt-4o", tn.Core().Lim, n) || s.Len() != 1 {
		t.Fatalf("%d levels chosen, want the team", s.Len())
	}
	if v, refused := s.Take(n, 1, 0); v != admit.Taken || refused != 0 {
		t.Fatalf("%v by level %d, want taken", v, refused)
	}
	s.Finish(n, n, st, 1)
	made := 0
	for _, e := range st.Load().ByName {
		if e.Peek() != nil {
			made++
		}
	}
	if made > 2 {
		t.Errorf("one call of t0007 made %d cores", made)
	}
}
