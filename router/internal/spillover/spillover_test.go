package spillover

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/router/internal/metrics"
	"github.com/ringgate/ringgate/router/internal/spill"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// cluster is a node's view and life as a test sets them.
type cluster struct {
	owner    string
	draining bool
}

func (c *cluster) Owners() func(string) string { return func(string) string { return c.owner } }
func (c *cluster) Clustered() bool             { return true }
func (c *cluster) Draining() bool              { return c.draining }

const ownedNow = 1 << 62

// newLoop is a loop over tenants a, b and c, with spillover_rps rps.
func newLoop(t *testing.T, rps int) (*Loop, *cluster) {
	t.Helper()
	clk := clockwork.NewFakeClock()
	var st atomic.Pointer[tenant.State]
	n := &spill.Node{Self: "self", Clock: clk}
	cs := tenant.NewCores(&st, tenant.Hooks{Spills: &n.Spills}, func() int64 { return clk.Now().UnixNano() }, clk)
	cfg := config.Default()
	cfg.Limits.SpilloverRPS = rps
	for _, name := range []string{"a", "b", "c"} {
		cfg.Tenants = append(cfg.Tenants, config.Tenant{Name: name, Keys: []string{"k" + name}, RPM: 10})
	}
	s, err := tenant.Build(cfg, nil, metrics.New(), cs)
	if err != nil {
		t.Fatal(err)
	}
	cs.Install(s, clk.Now().UnixNano())
	c := &cluster{owner: "self"}
	return &Loop{Node: n, State: &st, Reloads: new(sync.Mutex), Cluster: c, OwnedNow: ownedNow}, c
}

// A tick looks only at the tenants that had requests while no tenant has
// a spill, and at every tenant once one has; a struct a reload replaced
// is not looked at.
func TestScanLooksAtArrivals(t *testing.T) {
	l, _ := newLoop(t, 100)
	st := l.State.Load()
	stale := &tenant.Tenant{Name: "c"}
	l.Note(st.ByName["a"])
	l.Note(stale)
	arrived := l.arrived.Take()
	var names []string
	for name := range l.scan(st, arrived) {
		names = append(names, name)
	}
	if !slices.Equal(names, []string{"a"}) {
		t.Errorf("scanned %v with no spill, want [a]", names)
	}
	l.Node.Spills.Add(1)
	names = names[:0]
	for name := range l.scan(st, arrived) {
		names = append(names, name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"a", "b", "c"}) {
		t.Errorf("scanned %v with a spill, want every tenant", names)
	}
}

// The owner ends a spill when the node drains, spillover is disabled, or
// it no longer owns the tenant, in that order.
func TestOwnerEnds(t *testing.T) {
	l, c := newLoop(t, 100)
	a := l.State.Load().ByName["a"]
	a.OwnedUntil.Store(ownedNow)
	c.draining = true
	if got := l.ownerEnds(l.State.Load(), a, nil); got != "drain" {
		t.Errorf("draining: %q, want drain", got)
	}
	c.draining = false
	off, _ := newLoop(t, 0)
	if got := l.ownerEnds(off.State.Load(), a, nil); got != "disabled" {
		t.Errorf("spillover_rps 0: %q, want disabled", got)
	}
	a.OwnedUntil.Store(1)
	if got := l.ownerEnds(l.State.Load(), a, nil); got != "owner_changed" {
		t.Errorf("not owned: %q, want owner_changed", got)
	}
}
