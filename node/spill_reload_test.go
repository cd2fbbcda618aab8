package node

import (
	"slices"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/internal/redistest"
)

// TestReloadRemovesSpilledTenantThenRestores: a reload removes a tenant
// while its owner spills it, and the next reload puts it back (within a
// window and a slot TTL: its core is reclaimed, usage kept). The spill ends
// with the removal as any spill does, so the tenant decides again on its
// owner. When the first reload only dropped the spill (found by a
// reviewer), the reclaimed limiter stayed sealed: every request of the
// tenant on its owner was answered 503 tenant_moving, long after its
// windows were empty.
func TestReloadRemovesSpilledTenantThenRestores(t *testing.T) {
	const window = time.Second
	srv := redistest.Start(t)
	c := startClusterWith(t, 2, window, clOptions{Redis: srv.Addr(), SpilloverRPS: 40}, clTenant("hot", 100_000), clTenant("calm", 1000))
	owner := c.byName(c.owner("hot"))
	done := make(chan []clResult, 1)
	go func() {
		done <- c.clLoad("hot", c.live(), 0, time.Now(), 5*time.Millisecond, 2*time.Second, 32)
	}()
	if !spillLogged(owner, "on", "hot", 3*time.Second) {
		<-done
		t.Fatal("hot never spilled")
	}
	<-done // the load ends; the spill cools only after a second
	orig := *owner.cfg
	without := orig
	without.Tenants = slices.DeleteFunc(slices.Clone(orig.Tenants), func(tc config.Tenant) bool { return tc.Name == "hot" })
	if err := owner.Reload(&without); err != nil {
		t.Fatalf("reload without hot: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // pacing: the owner's spill loop sees the tenant gone
	if err := owner.Reload(&orig); err != nil {
		t.Fatalf("reload with hot back: %v", err)
	}
	// Quiet for two windows and the spill's lapse on the member.
	time.Sleep(2*window + 2*time.Second)
	codes := map[int]int{}
	var last clReply
	for range 10 {
		rep, err := c.post(owner, "hot", false, nil)
		if err != nil {
			t.Fatal(err)
		}
		codes[rep.status]++
		last = rep
		time.Sleep(100 * time.Millisecond) // pacing: 10/s, far under the limit and the spill threshold
	}
	t.Logf("hot on its owner %s, %v after the reloads: answers %v; last %s", owner.Name(), 2*window+2*time.Second, codes, last)
	t.Logf("owner's spillover log: %v", owner.log.find(map[string]any{"msg": "spillover", "tenant": "hot"}))
	if codes[200] != 10 {
		t.Errorf("a tenant far under its limit refused on its owner: %v (last: %s)", codes, last)
	}
}
