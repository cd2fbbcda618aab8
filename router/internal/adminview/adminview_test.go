package adminview

import (
	"sync/atomic"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/router/internal/metrics"
	"github.com/ringgate/ringgate/router/internal/status"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// source is a Source on cfg's state, alone (no cluster view) unless
// members is set.
func source(t *testing.T, cfg *config.Config, members []status.Member) Source {
	t.Helper()
	clk := clockwork.NewFakeClock()
	now := func() int64 { return clk.Now().UnixNano() }
	st := new(atomic.Pointer[tenant.State])
	cs := tenant.NewCores(st, tenant.Hooks{Spills: new(atomic.Int64)}, now, clk)
	s, err := tenant.Build(cfg, nil, metrics.New(), cs)
	if err != nil {
		t.Fatal(err)
	}
	s.Version = "v1"
	cs.Install(s, now())
	return Source{
		Node: "a", State: st, Clock: now,
		Spill: func(*tenant.Tenant) status.Spill { return status.Spill{Mode: "owner"} },
		Members: func() ([]status.Member, uint64, bool) {
			return members, 7, members != nil
		},
		Draining:   func() bool { return true },
		LastReload: func() *status.Reload { return nil },
	}
}

// Before a cluster view the node is the cluster alone; with one, a member
// on another config version makes the configs differ.
func TestCluster(t *testing.T) {
	cfg := config.Default()
	cfg.Node.Listen = "127.0.0.1:1"
	cv := source(t, cfg, nil).Cluster()
	if cv.Self != "a" || cv.RingVersion != 0 || cv.ConfigVersion != "v1" || len(cv.Members) != 1 ||
		cv.Members[0] != (status.Member{Name: "a", Addr: "127.0.0.1:1", State: "draining", ConfigVersion: "v1"}) {
		t.Fatalf("alone: %+v", cv)
	}
	ms := []status.Member{{Name: "a", ConfigVersion: "v1"}, {Name: "b", ConfigVersion: "v1"}}
	if cv = source(t, cfg, ms).Cluster(); cv.RingVersion != 7 || len(cv.Members) != 2 || cv.ConfigsDiffer {
		t.Fatalf("same versions: %+v", cv)
	}
	ms[1].ConfigVersion = ""
	if cv = source(t, cfg, ms).Cluster(); !cv.ConfigsDiffer {
		t.Fatalf("a member without a version: %+v", cv)
	}
}

// A tenant's and a team's views carry their names, limits and members; a
// name of the other kind, or none, is not found.
func TestTenantAndTeam(t *testing.T) {
	cfg := config.Default()
	cfg.Teams = []config.Team{{Name: "t", RPM: 10}}
	cfg.Tenants = []config.Tenant{{Name: "x", Keys: []string{"kx"}, RPM: 5, Team: "t"}}
	s := source(t, cfg, nil)
	entity, view, ok := s.Tenant("x")
	if !ok || entity != "x" {
		t.Fatalf("tenant x: %q %v", entity, ok)
	}
	tv := view("b", "")
	if tv.Owner != "b" || tv.Node != "a" || tv.Team != "t" || tv.Requests.Limit != 5 || tv.Spillover.Mode != "owner" {
		t.Fatalf("tenant x's view: %+v", tv)
	}
	entity, team, ok := s.Team("t")
	if !ok || entity != "team/t" {
		t.Fatalf("team t: %q %v", entity, ok)
	}
	if tm := team("", "unreachable"); tm.OwnerError != "unreachable" || len(tm.Tenants) != 1 {
		t.Fatalf("team t's view: %+v", tm)
	}
	if _, _, ok := s.Tenant("team/t"); ok {
		t.Fatal("a team found as a tenant")
	}
	if _, _, ok := s.Team("x"); ok {
		t.Fatal("a tenant found as a team")
	}
}

// This node's part of /ui/state lists the tenants it owns whose names
// match, busiest first, at most the limit, with how many matched; teams
// are not tenants.
func TestUINode(t *testing.T) {
	cfg := config.Default()
	cfg.Teams = []config.Team{{Name: "t", RPM: 10}}
	cfg.Tenants = []config.Tenant{{Name: "x1", Keys: []string{"k1"}, RPM: 5, Team: "t"}, {Name: "x2", Keys: []string{"k2"}, RPM: 5},
		{Name: "x3", Keys: []string{"k3"}, RPM: 5}, {Name: "y", Keys: []string{"ky"}, RPM: 5}}
	s := source(t, cfg, nil)
	s.Rebalances = func() []status.Rebalance { return []status.Rebalance{{RingVersion: 3}} }
	notX3 := func(entity string) bool { return entity != "x3" }
	p := s.UINode(notX3, "x", 1)
	if p.Node != "a" || p.Matched != 2 || len(p.Tenants) != 1 || p.Tenants[0].Owner != "a" || len(p.Rebalances) != 1 {
		t.Fatalf("owned x tenants, one listed: %+v", p)
	}
	if p = s.UINode(notX3, "", 10); p.Matched != 3 || len(p.Tenants) != 3 || p.Window != "1m0s" {
		t.Fatalf("every owned tenant: %d matched, %d listed, window %q", p.Matched, len(p.Tenants), p.Window)
	}
}
