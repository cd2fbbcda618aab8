package router

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/ring"
	"github.com/ringgate/ringgate/router/internal/away"
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
	tn := r.state.Load().ByName["acme"]
	now := r.clock()
	mirror := limiter.NewTenant(limiter.Limits{}, cfg.Limits.Window, cfg.Limits.SlotTTL)
	tk, _ := mirror.Admit(now, 10)
	d := limiter.DeltaOf(&tk)
	r.moves.Apply(tn, now, "b", []limiter.Delta{d}) // b is a member: its call holds a slot
	if got := tn.Core().Lim.Usage(now).InFlight; got != 1 {
		t.Fatalf("a member's call: %d in flight, want 1", got)
	}
	tk2, _ := mirror.Admit(now, 10)
	r.moves.Apply(tn, now, "gone", []limiter.Delta{limiter.DeltaOf(&tk2)}) // not in the view
	if got := tn.Core().Lim.Usage(now).InFlight; got != 1 {
		t.Errorf("after a report from a node gone from the view: %d in flight, want 1 (only the member's)", got)
	}
	if u := tn.Core().Lim.Usage(now); u.Requests != 2 {
		t.Errorf("%d requests counted, want both reports' (a gone node's admission still counts)", u.Requests)
	}
	// A node this one has not heard of yet (it joined a moment ago and
	// its gossip is behind) is alive: its call keeps its slot. Before, a
	// new owner dropped such a slot, then counted the node's late report
	// of it, and held one slot for good (two scale-ups in a row, in CI).
	tk3, _ := mirror.Admit(now, 10)
	r.moves.Apply(tn, now, "unseen", []limiter.Delta{limiter.DeltaOf(&tk3)})
	if got := tn.Core().Lim.Usage(now).InFlight; got != 2 {
		t.Errorf("after a report from a node not in the view yet: %d in flight, want 2", got)
	}
}

// A node that has just joined and has no ring yet does not count a peer's
// deltas as the tenant's owner: the previous owner may have handed the
// tenant to it already (its ring changed first) and reported the end of
// a call whose slot the state it handed holds; applied before that state
// is imported, the release finds no slot to free, and the import then
// holds the slot for good. Before, two scale-ups in a row left a new
// owner counting a call in flight after every call had ended (in CI).
func TestReleaseBeforeFirstRingHeld(t *testing.T) {
	clock := newSetClock(time.Now().UnixNano())
	r, cfg := testRouter(t, Options{Clock: clock})
	cfg.Tenants = []config.Tenant{{Name: "acme", Keys: []string{"k"}, RPM: 100, Concurrency: 2}}
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	tn := r.state.Load().ByName["acme"]
	now := r.clock()
	// The previous owner "a": one call running when it hands the tenant
	// to this node ("t"), which ends right after.
	prev := limiter.NewTenant(tn.Limits, cfg.Limits.Window, cfg.Limits.SlotTTL)
	tk, _ := prev.Admit(now, 10)
	st := prev.Freeze(now, "t")
	st.Holder = "a"
	d, handed := prev.FinishOrHand(now, &tk, 10)
	if !handed {
		t.Fatal("a frozen limiter kept the call's end")
	}
	r.moves.Apply(tn, now, "a", []limiter.Delta{r.ids.Name(d)}) // before this node's first ring
	// The first ring is slow to come (a slow join): the held release is
	// not applied here past away.HeldFor either.
	clock.Add(int64(away.HeldFor + time.Second))
	r.moves.SweepHeld()
	now = clock.Load()
	// Its first ring makes it the owner: hold, import, release.
	r.SetView(View{Ring: ring.New(1, []string{"t"}), Members: []Member{
		{Name: "a", Addr: "127.0.0.1:1", State: "active"}, {Name: "t", Addr: "127.0.0.1:2", State: "active"}}})
	r.moves.Hold("acme", time.Second)
	tn.Core().Lim.Import(now, st.As("t"))
	r.moves.Release("acme")
	if got := tn.Core().Lim.Usage(now).InFlight; got != 0 {
		t.Errorf("after the handed call ended: %d in flight, want 0", got)
	}
	// Standalone (no ring, ever), a node's own deltas are its to apply.
	tk2, _ := tn.Core().Lim.Admit(now, 10)
	own := limiter.DeltaOf(&tk2)
	solo, _ := testRouter(t, Options{})
	if err := solo.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	sn := solo.state.Load().ByName["acme"]
	solo.moves.Apply(sn, now, "", []limiter.Delta{own})
	if got := sn.Core().Lim.Usage(now).InFlight; got != 1 {
		t.Errorf("standalone, its own delta: %d in flight, want 1", got)
	}
}

// A hold that ends without an import (a take-back that got nothing: the
// tenant stays frozen for the other node) passes the deltas it held on to
// that node, which counts the tenant, rather than apply them to the frozen
// windows here, where they would count nowhere.
func TestReleaseStillFrozenPassesDeltasOn(t *testing.T) {
	var logs syncBuffer
	r, cfg := testRouter(t, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	cfg.Tenants = []config.Tenant{{Name: "acme", Keys: []string{"k"}, RPM: 100, Concurrency: 2}}
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	r.SetView(View{Ring: ring.New(1, []string{"t"}), Members: []Member{
		{Name: "b", Addr: "127.0.0.1:1", State: "active"}, {Name: "t", Addr: "127.0.0.1:2", State: "active"}}})
	tn := r.state.Load().ByName["acme"]
	now := r.clock()
	tn.Core().Lim.Freeze(now, "b")
	r.moves.Hold("acme", time.Second)
	mirror := limiter.NewTenant(limiter.Limits{}, cfg.Limits.Window, cfg.Limits.SlotTTL)
	tk, _ := mirror.Admit(now, 10)
	r.moves.Apply(tn, now, "c", []limiter.Delta{r.ids.Name(limiter.DeltaOf(&tk))})
	r.moves.Release("acme")
	if u := tn.Core().Lim.Usage(now); u.Requests != 0 || u.InFlight != 0 {
		t.Errorf("a delta held while frozen for b was applied here on release: %d requests, %d in flight", u.Requests, u.InFlight)
	}
	// On their way to b (unsigned here: lost, and said so).
	deadline := time.Now().Add(2 * time.Second)
	for !strings.Contains(logs.String(), `"phase":"delta_lost","tenant":"acme","owner":"b"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the held delta was not sent on to b; log: %s", logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's writes and the test's
// reads at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
