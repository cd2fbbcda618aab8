package router

import (
	"slices"
	"testing"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/router/internal/spill"
)

// TestSpillCountFollowsTenants: the count of tenants with a spill, which
// decides whether the spillover loop scans every tenant, goes back to 0
// when a spill ends and when a reload removes a tenant that had one.
func TestSpillCountFollowsTenants(t *testing.T) {
	r, cfg := testRouter(t, Options{})
	cfg.Tenants = []config.Tenant{{Name: "a", Keys: []string{"ka"}, RPM: 10}, {Name: "b", Keys: []string{"kb"}, RPM: 10}}
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	st := r.state.Load()
	a, b := st.ByName["a"], st.ByName["b"]
	spA, spB := &spill.Spill{Owner: "x"}, &spill.Spill{Owner: "y"}
	a.Core().Spill.Store(spA)
	if !b.Core().Spill.CompareAndSwap(nil, spB) || b.Core().Spill.CompareAndSwap(nil, spB) {
		t.Fatal("CompareAndSwap")
	}
	if got := r.spills.Node.Spills.Load(); got != 2 {
		t.Fatalf("spills %d, want 2", got)
	}
	a.Core().Spill.CompareAndSwap(spA, nil)
	if got := r.spills.Node.Spills.Load(); got != 1 {
		t.Fatalf("spills %d after one ended, want 1", got)
	}
	cfg.Tenants = cfg.Tenants[:1] // b goes, with its spill
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if got := r.spills.Node.Spills.Load(); got != 0 {
		t.Fatalf("spills %d after the reload removed b, want 0", got)
	}
}

// TestFallbackShareWindowAfterReload: a fallback share made before a
// reload that changes the window counts over the new one, one made after
// it over the new one too, and a reload that fails changes neither.
func TestFallbackShareWindowAfterReload(t *testing.T) {
	r, cfg := testRouter(t, Options{})
	cfg.Tenants = []config.Tenant{{Name: "a", Keys: []string{"ka"}, RPM: 10}, {Name: "b", Keys: []string{"kb"}, RPM: 10},
		{Name: "d", Keys: []string{"kd"}, RPM: 10}}
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	made := r.state.Load().ByName["a"].Core().Fb.Share()
	cfg.Limits.Window = 2 * cfg.Limits.Window
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if got := made.Window(); got != cfg.Limits.Window {
		t.Errorf("share made before the reload counts over %v, want %v", got, cfg.Limits.Window)
	}
	if got := r.state.Load().ByName["b"].Core().Fb.Share().Window(); got != cfg.Limits.Window {
		t.Errorf("share made after the reload counts over %v, want %v", got, cfg.Limits.Window)
	}
	bad := *cfg
	bad.Limits.Window = cfg.Limits.Window / 4
	bad.Tenants = append(slices.Clone(cfg.Tenants), config.Tenant{Name: "c", Keys: []string{"kc"}, RPM: 1, Team: "none"}) // no such team: tenant.Build fails
	if err := r.Reload(&bad); err == nil {
		t.Fatal("a reload naming an unknown team went through")
	}
	if got := r.state.Load().ByName["d"].Core().Fb.Share().Window(); got != cfg.Limits.Window {
		t.Errorf("after a failed reload, a share made counts over %v, want the window in force %v", got, cfg.Limits.Window)
	}
}
