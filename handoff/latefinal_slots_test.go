package handoff

import (
	"testing"
	"time"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/ring"
)

// A new owner that continued a tenant from its previous owner's periodic
// snapshot (the previous owner was alive but did not answer the fetch in
// time) counts, in Away, the slots of calls that have ended on the previous
// owner since. The previous owner's late final snapshot, which says no call
// runs, frees them (limiter.Tenant.Replace replaces Away too; it once
// replaced only requests, tokens and the own slots, and the tenant was held
// at its concurrency limit by calls that had ended, until slot_ttl).
func TestLateFinalFreesEndedAwaySlots(t *testing.T) {
	c, store, tenant, ab, abc := lateFinalCluster(t)

	now := c.clk.Now()
	alim := c.node("a").mt.Limiter(tenant)
	tk1, d1 := alim.Admit(now, 10)
	tk2, d2 := alim.Admit(now, 10)
	if !d1.Allowed || !d2.Allowed {
		t.Fatal("a did not admit two calls")
	}
	c.node("a").m.SaveOwned() // periodic snapshot: a's two calls running
	// Both calls end on a, which still owns the tenant: released there.
	alim.Finish(now, &tk1, 0)
	alim.Finish(now, &tk2, 0)
	if u := alim.Usage(now); u.InFlight != 0 {
		t.Fatalf("a: %d in flight after both calls ended", u.InFlight)
	}

	// a stalls (GC pause, CPU): c's fetch fails, c continues from the
	// periodic snapshot.
	c.net.Partition("a", true)
	arr := c.change("c", ab, abc)
	t.Logf("c's arrival: %v", arr.Counts())
	clim := c.node("c").mt.Limiter(tenant)
	u := clim.Usage(now)
	t.Logf("c after the stale import: in flight %d, tokens %d", u.InFlight, u.Tokens)

	// a comes back, sees the change, freezes and writes its final snapshot:
	// nothing runs on it.
	c.net.Partition("a", false)
	c.change("a", ab, abc)
	if s := store.snaps[tenant]; !s.Final || s.Writer != "a" || len(s.State.Slots.Buckets) != 0 {
		t.Fatalf("a's final: final=%v writer=%s slots=%v", s.Final, s.Writer, s.State.Slots.Buckets)
	}

	// c's late-final watcher replaces the stale state with the final: the
	// tokens (20 reserved in the snapshot, settled to 0 since) show it.
	deadline := time.Now().Add(lateFor)
	for clim.Usage(now).Tokens != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	u = clim.Usage(now)
	if u.Tokens != 0 {
		t.Fatalf("late final never applied (tokens %d)", u.Tokens)
	}
	t.Logf("c after the late final: in flight %d, tokens %d, away %v", u.InFlight, u.Tokens, clim.AwayNodes())
	_, d := clim.Admit(now, 0)
	if u.InFlight != 0 || !d.Allowed {
		t.Fatalf("after a's final says nothing runs, c still counts %d slots of a's ended calls; admit: allowed=%v limited=%v (held until slot_ttl)",
			u.InFlight, d.Allowed, d.Limited)
	}
}

// The mirror image: calls a admitted after its periodic snapshot and still
// running when it froze are in its late final, and count on c from then
// (before the fix, c admitted the whole concurrency limit on top of them).
func TestLateFinalCountsRunningAwaySlots(t *testing.T) {
	c, _, tenant, ab, abc := lateFinalCluster(t)
	now := c.clk.Now()
	alim := c.node("a").mt.Limiter(tenant)
	tk0, _ := alim.Admit(now, 10)
	alim.Finish(now, &tk0, 10) // something in the window, no call running
	c.node("a").m.SaveOwned()  // periodic snapshot: tokens 10, no slot
	for range 2 {              // two calls start on a after it
		if _, d := alim.Admit(now, 5); !d.Allowed {
			t.Fatal("a refused")
		}
	}
	c.net.Partition("a", true)
	c.change("c", ab, abc)
	c.net.Partition("a", false)
	c.change("a", ab, abc) // final: 2 slots running on a, tokens 20
	clim := c.node("c").mt.Limiter(tenant)
	deadline := time.Now().Add(lateFor)
	for clim.Usage(now).Tokens != 20 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := clim.Usage(now).Tokens; got != 20 {
		t.Fatalf("late final never applied (tokens %d)", got)
	}
	admitted, _ := admitN(clim, now, 2)
	t.Logf("c: in flight %d of limit 2 with a's 2 calls running; c admitted %d more", clim.Usage(now).InFlight, admitted)
	if admitted > 0 {
		t.Fatalf("c admitted %d calls on top of a's 2 running: %d at once, limit 2", admitted, 2+admitted)
	}
}

// lateFinalCluster is a, b, c with a tenant of concurrency 2 that the ring
// {a, b} gives to a and {a, b, c} to c, the ring {a, b} in force.
func lateFinalCluster(t *testing.T) (c *testCluster, store *InmemStore, tenant string, ab, abc *ring.Ring) {
	t.Helper()
	ab = ring.New(1, []string{"a", "b"})
	abc = ring.New(2, []string{"a", "b", "c"})
	tenant = tenantOwnedBy(t, ab, "a", abc, "c")
	store = NewInmemStore()
	c = newTestCluster(t, store, tenant)
	for _, n := range []string{"a", "b", "c"} {
		mt := c.node(n).mt
		lim := limiter.NewTenant(limiter.Limits{Concurrency: 2}, testWindow, time.Hour)
		lim.OnChange(func() {
			mt.changedMu.Lock()
			mt.changed = append(mt.changed, tenant)
			mt.changedMu.Unlock()
		})
		mt.lims[tenant] = lim
	}
	c.change("a", nil, ab)
	c.node("b").mt.setRing(ab)
	return c, store, tenant, ab, abc
}
