package router

import (
	"testing"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/ring"
)

// A report of a call's slot from a node no longer in the view (it was on
// the way when the node died, or another node passed it on) does not hold
// the slot for good: no membership change is coming to free it. Before,
// a CI run's kill -9 left a tenant's owner counting a dead node's call in
// flight after every call had ended (a slot held until slot_ttl).
func TestSlotFromGoneNodeDropped(t *testing.T) {
	r, cfg := testRouter(t, Options{})
	cfg.Tenants = []config.Tenant{{Name: "acme", Keys: []string{"k"}, RPM: 100, Concurrency: 2}}
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	r.SetView(View{Ring: ring.New(1, []string{"t"}), Members: []Member{
		{Name: "b", Addr: "127.0.0.1:1", State: "active"}, {Name: "gone", Addr: "127.0.0.1:3", State: "active"},
		{Name: "t", Addr: "127.0.0.1:2", State: "active"}}})
	r.SetView(View{Ring: ring.New(1, []string{"t"}), Members: []Member{ // "gone" left (found dead)
		{Name: "b", Addr: "127.0.0.1:1", State: "active"}, {Name: "t", Addr: "127.0.0.1:2", State: "active"}}})
	tn := r.state.Load().byName["acme"]
	now := r.clock()
	mirror := limiter.NewTenant(limiter.Limits{}, cfg.Limits.Window, cfg.Limits.SlotTTL)
	tk, _ := mirror.Admit(now, 10)
	d := limiter.DeltaOf(&tk)
	r.applyOnce(tn, now, "b", []limiter.Delta{d}) // b is a member: its call holds a slot
	if got := tn.c().lim.Usage(now).InFlight; got != 1 {
		t.Fatalf("a member's call: %d in flight, want 1", got)
	}
	tk2, _ := mirror.Admit(now, 10)
	r.applyOnce(tn, now, "gone", []limiter.Delta{limiter.DeltaOf(&tk2)}) // not in the view
	if got := tn.c().lim.Usage(now).InFlight; got != 1 {
		t.Errorf("after a report from a node gone from the view: %d in flight, want 1 (only the member's)", got)
	}
	if u := tn.c().lim.Usage(now); u.Requests != 2 {
		t.Errorf("%d requests counted, want both reports' (a gone node's admission still counts)", u.Requests)
	}
	// A node this one has not heard of yet (it joined a moment ago and
	// its gossip is behind) is alive: its call keeps its slot. Before, a
	// new owner dropped such a slot, then counted the node's late report
	// of it, and held one slot for good (two scale-ups in a row, in CI).
	tk3, _ := mirror.Admit(now, 10)
	r.applyOnce(tn, now, "unseen", []limiter.Delta{limiter.DeltaOf(&tk3)})
	if got := tn.c().lim.Usage(now).InFlight; got != 2 {
		t.Errorf("after a report from a node not in the view yet: %d in flight, want 2", got)
	}
}
