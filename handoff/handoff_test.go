package handoff

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/ring"
	"github.com/ringgate/ringgate/snapshot"
)

// memTenants is Tenants in memory: limiters, gates and the ring a node routes
// by, for unit tests of the protocol without HTTP.
type memTenants struct {
	self  string
	names []string
	lims  map[string]*limiter.Tenant
	mu    sync.Mutex
	held  map[string]bool
	ring  *ring.Ring
	owned map[string]bool // owned at some point
	// changed are the tenants whose limiter changed since it was last
	// found empty (limiter.Tenant.OnChange), as the router lists them.
	changedMu sync.Mutex
	changed   []string
}

const (
	testWindow = time.Minute
	testLimit  = 100
)

func newMemTenants(self string, names ...string) *memTenants {
	mt := &memTenants{self: self, names: names, lims: map[string]*limiter.Tenant{}, held: map[string]bool{}, owned: map[string]bool{}}
	for _, n := range names {
		lim := limiter.NewTenant(limiter.Limits{Requests: testLimit}, testWindow, time.Hour)
		lim.OnChange(func() {
			mt.changedMu.Lock()
			mt.changed = append(mt.changed, n)
			mt.changedMu.Unlock()
		})
		mt.lims[n] = lim
	}
	return mt
}

func (mt *memTenants) Changed() []string {
	mt.changedMu.Lock()
	defer mt.changedMu.Unlock()
	out := mt.changed
	mt.changed = nil
	return out
}

func (mt *memTenants) Names() []string                  { return mt.names }
func (mt *memTenants) Limiter(n string) *limiter.Tenant { return mt.lims[n] }
func (mt *memTenants) Counted(n string) *limiter.Tenant { return mt.lims[n] }
func (mt *memTenants) MovedTo(n string) string {
	if lim := mt.lims[n]; lim != nil {
		return lim.MovedTo()
	}
	return ""
}
func (mt *memTenants) Thaw(n string) {
	if lim := mt.lims[n]; lim != nil {
		lim.Thaw()
	}
}
func (mt *memTenants) Freeze(n string, now int64, to string) (limiter.State, bool) {
	if lim := mt.lims[n]; lim != nil {
		return lim.Freeze(now, to), true
	}
	return limiter.State{}, false
}
func (mt *memTenants) Hold(n string, _ time.Duration) bool {
	mt.mu.Lock()
	mt.held[n] = true
	mt.mu.Unlock()
	return true
}
func (mt *memTenants) Release(n string)                           { mt.mu.Lock(); delete(mt.held, n); mt.mu.Unlock() }
func (mt *memTenants) Held(n string) bool                         { mt.mu.Lock(); defer mt.mu.Unlock(); return mt.held[n] }
func (mt *memTenants) OwnedWithin(n string, _ time.Duration) bool { return mt.Owns(n) || mt.owned[n] }
func (mt *memTenants) Deciding() bool                             { return true }
func (mt *memTenants) Owns(n string) bool {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	o, ok := mt.ring.Owner(n)
	return ok && o == mt.self
}
func (mt *memTenants) setRing(r *ring.Ring) {
	mt.mu.Lock()
	mt.ring = r
	mt.mu.Unlock()
	for _, n := range mt.names {
		if mt.Owns(n) {
			mt.owned[n] = true
		}
	}
}

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now int64
}

func (c *clock) Now() int64 { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

type testNode struct {
	name string
	mt   *memTenants
	m    *Mover
}

type testCluster struct {
	t     *testing.T
	net   *InmemNet
	store *InmemStore
	clk   *clock
	nodes map[string]*testNode
	names []string
}

func newTestCluster(t *testing.T, store *InmemStore, names ...string) *testCluster {
	return &testCluster{t: t, net: NewInmemNet(), store: store, clk: &clock{now: int64(time.Hour)}, nodes: map[string]*testNode{}, names: names}
}

func (c *testCluster) node(name string) *testNode {
	if nd := c.nodes[name]; nd != nil {
		return nd
	}
	mt := newMemTenants(name, c.names...)
	var st Store = NoStore{}
	if c.store != nil {
		st = c.store
	}
	m := New(Config{Self: name, Window: testWindow, FetchTimeout: 50 * time.Millisecond, FinalWait: 20 * time.Millisecond, ReconcileAfter: 10 * time.Millisecond, Clock: c.clk.Now},
		mt, c.net.Peers(name), st, func() *ring.Ring { return mt.ring })
	c.net.Join(name, m)
	nd := &testNode{name: name, mt: mt, m: m}
	c.nodes[name] = nd
	return nd
}

// change runs a ring change on one node.
func (c *testCluster) change(name string, from, to *ring.Ring) Arrival {
	nd := c.node(name)
	_, _, a := nd.m.Change(from, to, func() { nd.mt.setRing(to) })
	return a
}

// tenantOwnedBy finds a tenant name that r gives to owner and before gives
// to beforeOwner.
func tenantOwnedBy(t *testing.T, before *ring.Ring, beforeOwner string, r *ring.Ring, owner string) string {
	for i := range 10000 {
		n := fmt.Sprintf("t%d", i)
		a, _ := before.Owner(n)
		b, _ := r.Owner(n)
		if a == beforeOwner && b == owner {
			return n
		}
	}
	t.Fatalf("no tenant moves from %s to %s", beforeOwner, owner)
	return ""
}

func admitN(lim *limiter.Tenant, now int64, n int) (admitted, moved int) {
	for range n {
		_, d := lim.Admit(now, 0)
		if d.Allowed {
			admitted++
		}
		if d.Moved {
			moved++
		}
	}
	return
}

func TestTakeOverPaths(t *testing.T) {
	ab := ring.New(1, []string{"a", "b"})
	abc := ring.New(2, []string{"a", "b", "c"})
	tenant := tenantOwnedBy(t, ab, "a", abc, "c")

	for _, tc := range []struct {
		name string
		// before runs after a counted 60 in the window, before c takes over.
		before       func(c *testCluster)
		store        bool
		storeDown    bool
		want         string // how the state arrived
		wantAdmitted int    // what c admits after taking over
	}{
		{name: "peer: the previous owner has not seen the change", want: "peer", wantAdmitted: 40},
		{name: "peer: the previous owner saw it first", before: func(c *testCluster) { c.change("a", ab, abc) }, want: "peer", wantAdmitted: 40},
		{name: "peer without a store, store down", store: true, storeDown: true, want: "peer", wantAdmitted: 40},
		{name: "crash, final in the store", store: true, before: func(c *testCluster) {
			c.change("a", ab, abc)
			c.net.Partition("a", true)
		}, want: "redis_snapshot", wantAdmitted: 40},
		{name: "crash, periodic snapshot in the store", store: true, before: func(c *testCluster) {
			c.node("a").m.SaveOwned()
			c.net.Partition("a", true)
		}, want: "stale_redis_snapshot", wantAdmitted: testLimit / 3}, // never more than the conservative budget
		{name: "crash, no store", before: func(c *testCluster) { c.net.Partition("a", true) }, want: "conservative", wantAdmitted: testLimit / 3},
		{name: "crash, store down", store: true, storeDown: true, before: func(c *testCluster) {
			c.node("a").m.SaveOwned()
			c.net.Partition("a", true)
		}, want: "conservative", wantAdmitted: testLimit / 3},
		{name: "crash, nothing in the store", store: true, before: func(c *testCluster) { c.net.Partition("a", true) }, want: "conservative", wantAdmitted: testLimit / 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var store *InmemStore
			if tc.store {
				store = NewInmemStore()
			}
			c := newTestCluster(t, store, tenant)
			for _, n := range []string{"a", "b", "c"} {
				c.node(n)
			}
			c.change("a", nil, ab)
			c.node("b").mt.setRing(ab)
			if got, _ := admitN(c.node("a").mt.Limiter(tenant), c.clk.Now(), 60); got != 60 {
				t.Fatalf("a admitted %d of 60", got)
			}
			if tc.before != nil {
				tc.before(c)
			}
			if tc.storeDown {
				store.Down(true)
			}
			a := c.change("c", ab, abc)
			if got := a.Counts()[tc.want]; got != 1 {
				t.Fatalf("arrival %v, want 1 %s", a.Counts(), tc.want)
			}
			if c.node("c").mt.Held(tenant) {
				t.Fatal("c still holds the tenant")
			}
			got, _ := admitN(c.node("c").mt.Limiter(tenant), c.clk.Now(), 100)
			if got != tc.wantAdmitted {
				t.Fatalf("c admitted %d after taking over, want %d", got, tc.wantAdmitted)
			}
			if _, moved := admitN(c.node("a").mt.Limiter(tenant), c.clk.Now(), 1); tc.want == "peer" && moved != 1 {
				t.Fatal("the previous owner still decides for the tenant after handing it over")
			}
		})
	}
}

// A tenant that comes back to a node that froze it when it left is thawed,
// whichever way its state arrives, so it never stays counted twice and
// locked out.
func TestTenantComingBackIsThawed(t *testing.T) {
	a1 := ring.New(1, []string{"a"})
	ab := ring.New(2, []string{"a", "b"})
	tenant := tenantOwnedBy(t, a1, "a", ab, "b")
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("b crashed=%v", crash), func(t *testing.T) {
			c := newTestCluster(t, nil, tenant)
			c.change("a", nil, a1)
			c.change("a", a1, ab) // a hands the tenant to b (frozen, b not asked yet)
			c.change("b", nil, ab)
			if crash {
				c.net.Partition("b", true)
			}
			c.change("a", ab, a1) // b leaves or dies: the tenant comes back to a
			lim := c.node("a").mt.Limiter(tenant)
			if lim.MovedTo() != "" {
				t.Fatalf("tenant back on a still moved to %q", lim.MovedTo())
			}
			if got, _ := admitN(lim, c.clk.Now(), 10); got != 10 {
				t.Fatalf("tenant back on a admitted %d of 10", got)
			}
		})
	}
}

// Two changes in a row: c asks a, which handed the tenant to b meanwhile;
// c follows to b, which is still loading it (busy), and gets it once b has.
func TestTwoChangesFollowMovedAndBusy(t *testing.T) {
	a1 := ring.New(1, []string{"a"})
	ab := ring.New(2, []string{"a", "b"})
	abc := ring.New(3, []string{"a", "b", "c"})
	var tenant string
	for i := range 10000 {
		n := fmt.Sprintf("t%d", i)
		if o, _ := ab.Owner(n); o != "b" {
			continue
		}
		if o, _ := abc.Owner(n); o == "c" {
			tenant = n
			break
		}
	}
	if tenant == "" {
		t.Fatal("no tenant moves a → b → c")
	}
	c := newTestCluster(t, nil, tenant)
	c.change("a", nil, a1)
	admitN(c.node("a").mt.Limiter(tenant), c.clk.Now(), 70)
	c.change("b", a1, ab) // b takes it from a
	b := c.node("b")
	b.mt.Hold(tenant, time.Second) // b is (again) loading it
	go func() {
		time.Sleep(15 * time.Millisecond)
		b.mt.Release(tenant)
	}()
	// c's view: the tenant was a's (it never saw b own it).
	arr := c.change("c", a1, abc)
	if arr.Peer != 1 {
		t.Fatalf("arrival %v, want peer", arr.Counts())
	}
	if got, _ := admitN(c.node("c").mt.Limiter(tenant), c.clk.Now(), 100); got != 30 {
		t.Fatalf("c admitted %d, want 30", got)
	}
	if _, moved := admitN(b.mt.Limiter(tenant), c.clk.Now(), 1); moved != 1 {
		t.Fatal("b still decides for the tenant")
	}
}

// A final snapshot is accepted only from the tenant's owner in the previous
// ring: two writers under the same member-set hash cannot both hand over.
func TestFinalOnlyFromPreviousOwner(t *testing.T) {
	ab := ring.New(1, []string{"a", "b"})
	abc := ring.New(2, []string{"a", "b", "c"})
	tenant := tenantOwnedBy(t, ab, "a", abc, "c")
	store := NewInmemStore()
	c := newTestCluster(t, store, tenant)
	c.change("a", nil, ab)
	admitN(c.node("a").mt.Limiter(tenant), c.clk.Now(), 60)
	c.node("a").m.SaveOwned()
	// b writes a final for the same change, with nothing in it.
	st := limiter.NewTenant(limiter.Limits{Requests: testLimit}, testWindow, time.Hour).Export(c.clk.Now())
	now := c.clk.Now()
	_ = store.SaveBatch(t.Context(), []*snapshot.Snapshot{{Tenant: tenant, Writer: "b", WrittenAt: time.Now().UnixNano(), RingHash: abc.Hash(), Final: true, State: st}}, time.Minute)
	_ = now
	c.net.Partition("a", true)
	arr := c.change("c", ab, abc)
	if arr.Final != 0 {
		t.Fatalf("took a final from b, which never owned the tenant: %v", arr.Counts())
	}
	if got, _ := admitN(c.node("c").mt.Limiter(tenant), c.clk.Now(), 100); got > 40 {
		t.Fatalf("c admitted %d, more than the 40 left", got)
	}
}

// A node's first ring (it just joined) is a change from nothing: it asks
// the owner among the other members, and a cluster starting has nobody to
// ask.
func TestFirstRing(t *testing.T) {
	a1 := ring.New(1, []string{"a"})
	ab := ring.New(1, []string{"a", "b"})
	tenant := tenantOwnedBy(t, a1, "a", ab, "b")
	c := newTestCluster(t, nil, tenant)
	if arr := c.change("a", nil, a1); arr.Fresh != 1 {
		t.Fatalf("a starting a cluster: %v, want fresh", arr.Counts())
	}
	admitN(c.node("a").mt.Limiter(tenant), c.clk.Now(), 55)
	if arr := c.change("b", nil, ab); arr.Peer != 1 {
		t.Fatalf("b joining: %v, want peer", arr.Counts())
	}
	if got, _ := admitN(c.node("b").mt.Limiter(tenant), c.clk.Now(), 100); got != 45 {
		t.Fatalf("b admitted %d, want 45", got)
	}
}

func TestWireRoundTrip(t *testing.T) {
	lim := limiter.NewTenant(limiter.Limits{Requests: 10}, testWindow, time.Hour)
	lim.Admit(int64(time.Hour), 5)
	st := lim.Export(int64(time.Hour))
	in := []Reply{{Tenant: "x", Status: Handed, State: st}, {Tenant: "y", Status: Moved, To: "n3"}, {Tenant: "z", Status: NotHere}, {Tenant: "w", Status: Busy}}
	out, err := DecodeReplies(EncodeReplies(nil, "n1", 1, in))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) || out[0].State.Requests.Buckets[0].Value != 1 || out[1].To != "n3" || out[2].Status != NotHere || out[3].Status != Busy {
		t.Fatalf("round trip: %+v", out)
	}
	for _, bad := range [][]byte{nil, []byte("RGH"), []byte("RGH\x02\x00"), []byte("RGH\x01\x01\x09\x01x"), append(EncodeReplies(nil, "n", 1, in), 0)} {
		if _, err := DecodeReplies(bad); err == nil {
			t.Fatalf("decoded %q", bad)
		}
	}
}

func FuzzDecodeReplies(f *testing.F) {
	lim := limiter.NewTenant(limiter.Limits{Requests: 10}, testWindow, time.Hour)
	lim.Admit(int64(time.Hour), 5)
	f.Add(EncodeReplies(nil, "n1", 1, []Reply{{Tenant: "x", Status: Handed, State: lim.Export(int64(time.Hour))}, {Tenant: "y", Status: Moved, To: "n2"}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := DecodeReplies(b)
		if err != nil {
			return
		}
		if _, err := DecodeReplies(EncodeReplies(nil, "n", 1, rs)); err != nil {
			t.Fatalf("re-encoding a decoded answer: %v", err)
		}
	})
}

// A node asked again, long after, for a tenant it froze for the asker (the
// asker has owned it since and asks because its ring stepped out and back)
// answers NotHere: its old frozen state must not replace the asker's newer
// account.
func TestOldFreezeNotHandedAgain(t *testing.T) {
	a1 := ring.New(1, []string{"a"})
	ab := ring.New(2, []string{"a", "b"})
	tenant := tenantOwnedBy(t, a1, "a", ab, "b")
	c := newTestCluster(t, nil, tenant)
	c.change("a", nil, a1)
	c.change("b", nil, ab) // b takes the tenant from a (a freezes it for b)
	c.node("a").mt.setRing(ab)
	if got := c.node("a").m.HandOver("b", []string{tenant}); got[0].Status != Handed {
		t.Fatalf("asked again at once: %v, want handed (the first answer may have been lost)", got[0].Status)
	}
	delete(c.node("a").mt.owned, tenant) // a window later: a has not owned it since
	if got := c.node("a").m.HandOver("b", []string{tenant}); got[0].Status != NotHere {
		t.Fatalf("asked again a window later: %v, want not_here", got[0].Status)
	}
}

// Two nodes join at once: the first ring of each is a change from nothing,
// and the owner among "the other members" may be the other joiner, which
// never had the tenant. It is asked of every member then, and the real
// owner hands it over.
func TestTwoJoinersAskEveryone(t *testing.T) {
	ad := ring.New(1, []string{"a", "d"})
	all := ring.New(2, []string{"a", "b", "c", "d"})
	var tenant string
	for i := range 10000 {
		n := fmt.Sprintf("t%d", i)
		if o, _ := ad.Owner(n); o != "a" {
			continue
		}
		if o, _ := all.Owner(n); o != "c" {
			continue
		}
		if o, _ := ring.New(0, []string{"a", "b", "d"}).Owner(n); o == "b" {
			tenant = n
			break
		}
	}
	if tenant == "" {
		t.Fatal("no tenant for the sequence")
	}
	for _, store := range []bool{false, true} {
		t.Run(fmt.Sprintf("store=%v", store), func(t *testing.T) {
			var st *InmemStore
			if store {
				st = NewInmemStore()
			}
			c := newTestCluster(t, st, tenant)
			for _, n := range []string{"a", "b", "c", "d"} {
				c.node(n)
			}
			c.change("a", nil, ad)
			c.node("d").mt.setRing(ad)
			admitN(c.node("a").mt.Limiter(tenant), c.clk.Now(), testLimit)
			arr := c.change("c", nil, all) // b has not seen its ring yet
			if arr.Peer != 1 {
				t.Fatalf("arrival %v, want peer (from a, asked after b said not here)", arr.Counts())
			}
			if got, _ := admitN(c.node("c").mt.Limiter(tenant), c.clk.Now(), testLimit); got != 0 {
				t.Fatalf("c admitted %d on top of a's full window", got)
			}
		})
	}
}

// mutualFreeze runs two changes in a row that leave b and c each holding
// a tenant frozen for the other (c owns it by the last ring), 30 of its 100
// used: c asks a first, b asks a (moved to c), follows, c hands it to b,
// then b loses it by its ring.
func mutualFreeze(t *testing.T) (c *testCluster, tenant string, b, cn *testNode) {
	t.Helper()
	r1 := ring.New(1, []string{"a"})
	r2 := ring.New(2, []string{"a", "b"})
	r3 := ring.New(3, []string{"a", "b", "c"})
	for i := range 10000 {
		if n := fmt.Sprintf("t%d", i); mustOwner(r2, n) == "b" && mustOwner(r3, n) == "c" {
			tenant = n
			break
		}
	}
	c = newTestCluster(t, nil, tenant)
	for _, n := range []string{"a", "b", "c"} {
		c.node(n)
	}
	c.change("a", nil, r1)
	admitN(c.node("a").mt.Limiter(tenant), c.clk.Now(), 30)
	c.change("c", r1, r3)
	c.change("b", r1, r2)
	c.change("b", r2, r3)
	b, cn = c.node("b"), c.node("c")
	if bl, cl := b.mt.Limiter(tenant), cn.mt.Limiter(tenant); bl.MovedTo() != "c" || cl.MovedTo() != "b" {
		t.Skipf("sequence did not freeze both (b→%q, c→%q)", bl.MovedTo(), cl.MovedTo())
	}
	return c, tenant, b, cn
}

// Two changes in a row can leave two nodes each frozen for the other; the
// ring's owner takes the tenant back (Reconcile) instead of bouncing every
// request between them.
func TestReconcileMutualFreeze(t *testing.T) {
	c, tenant, _, cn := mutualFreeze(t)
	cl := cn.mt.Limiter(tenant)
	for range 3 {
		cn.m.Reconcile()
		time.Sleep(15 * time.Millisecond)
	}
	if cl.MovedTo() != "" {
		t.Fatalf("c still frozen for %q after reconciling", cl.MovedTo())
	}
	if got, _ := admitN(cl, c.clk.Now(), 100); got != 70 {
		t.Fatalf("c admitted %d after taking the tenant back, want the 70 left", got)
	}
}

// A node that joins (its first ring) and gains a pinned tenant asks the
// node its key placed the tenant on, not the one its own name would: with
// that node cut off, the state still arrives from the right one.
func TestJoinerFindsPinnedTenantsOwner(t *testing.T) {
	three, four := ring.New(1, []string{"a", "b", "c"}), ring.New(2, []string{"a", "b", "c", "d"})
	// A team key that moves to the joiner d, and a tenant whose own name
	// is placed elsewhere than the key among a, b, c.
	var key, tenant, keyOwner, nameOwner string
	for i := 0; i < 10000 && tenant == ""; i++ {
		k := fmt.Sprintf("team/%d", i)
		if o, _ := four.Owner(k); o != "d" {
			continue
		}
		key, keyOwner = k, mustOwner(three, k)
		for j := range 10000 {
			n := fmt.Sprintf("t%d", j)
			if o := mustOwner(three, n); o != keyOwner {
				tenant, nameOwner = n, o
				break
			}
		}
	}
	pins := ring.Pins{tenant: key}
	before, after := three.WithPins(pins), four.WithPins(pins)
	c := newTestCluster(t, nil, tenant)
	for _, n := range []string{"a", "b", "c", "d"} {
		c.node(n)
	}
	for _, n := range []string{"a", "b", "c"} {
		c.change(n, nil, before)
	}
	lim := c.node(keyOwner).mt.lims[tenant]
	lim.Import(c.clk.Now(), limiter.State{}) // whatever the start left: 7 admitted, no more
	if a, _ := admitN(lim, c.clk.Now(), 7); a != 7 {
		t.Fatalf("the owner %s admitted %d of 7", keyOwner, a)
	}
	c.net.Partition(nameOwner, true) // the node the unpinned name points at
	for _, n := range []string{"a", "b", "c"} {
		c.change(n, before, after)
	}
	arr := c.change("d", nil, after)
	if arr.Peer != 1 {
		t.Fatalf("d took %s over %+v, want from its previous owner %s (its name alone points at %s)", tenant, arr.Counts(), keyOwner, nameOwner)
	}
	if u := c.node("d").mt.lims[tenant].Usage(c.clk.Now()); u.Requests != 7 {
		t.Errorf("d holds %d requests of %s, want the 7 %s admitted", u.Requests, tenant, keyOwner)
	}
}

func mustOwner(r *ring.Ring, key string) string {
	o, _ := r.Owner(key)
	return o
}

// countingStore is InmemStore that remembers each save's tenants.
type countingStore struct {
	*InmemStore
	mu     sync.Mutex
	rounds [][]string
}

func (s *countingStore) SaveBatch(ctx context.Context, snaps []*snapshot.Snapshot, ttl time.Duration) error {
	var names []string
	for _, sn := range snaps {
		names = append(names, sn.Tenant)
	}
	slices.Sort(names)
	s.mu.Lock()
	s.rounds = append(s.rounds, names)
	s.mu.Unlock()
	return s.InmemStore.SaveBatch(ctx, snaps, ttl)
}

func (s *countingStore) last() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.rounds) == 0 {
		return nil
	}
	return s.rounds[len(s.rounds)-1]
}

// TestSaveOwnedLooksAtChangedOnly: among 20 000 configured tenants, the
// periodic save writes the busy ones every round, the one that just
// emptied once more, and none of the idle ones; it asks the node about the
// tenants that changed, not about every configured one, and a tenant
// charged again after it emptied is written again.
func TestSaveOwnedLooksAtChangedOnly(t *testing.T) {
	names := make([]string, 20_000)
	for i := range names {
		names[i] = fmt.Sprintf("t%05d", i)
	}
	clk := &clock{now: int64(time.Hour)}
	mt := newMemTenants("a", names...)
	mt.setRing(ring.New(1, []string{"a"}))
	lookups := 0
	counted := &countingTenants{memTenants: mt, lookups: &lookups}
	store := &countingStore{InmemStore: NewInmemStore()}
	m := New(Config{Self: "a", Window: testWindow, Clock: clk.Now}, counted, NewInmemNet().Peers("a"), store, func() *ring.Ring { return mt.ring })

	call := func(n string) { // a call admitted and finished
		tk, d := mt.lims[n].Admit(clk.Now(), 10)
		if !d.Allowed {
			t.Fatalf("%s refused", n)
		}
		mt.lims[n].Finish(clk.Now(), &tk, 10)
	}
	busy := []string{"t00007", "t01234", "t19999"}
	for _, n := range busy {
		call(n)
		call(n)
	}
	m.SaveOwned()
	if got := store.last(); !slices.Equal(got, busy) {
		t.Fatalf("first save wrote %v, want %v", got, busy)
	}
	if lookups > 3*len(busy) {
		t.Errorf("the save looked up %d tenants for %d busy among %d configured", lookups, len(busy), len(names))
	}
	m.SaveOwned() // busy and unchanged: written again (its age matters after a crash)
	if got := store.last(); !slices.Equal(got, busy) {
		t.Fatalf("second save wrote %v, want %v", got, busy)
	}

	clk.mu.Lock()
	clk.now += int64(testWindow + time.Second) // everything left the window
	clk.mu.Unlock()
	rounds := len(store.rounds)
	m.SaveOwned() // just emptied: written once as empty
	if got := store.last(); len(store.rounds) != rounds+1 || !slices.Equal(got, busy) {
		t.Fatalf("save after the window wrote %v, want the emptied %v", got, busy)
	}
	m.SaveOwned() // empty and written as such: nothing to write
	if len(store.rounds) != rounds+1 {
		t.Fatalf("an empty round wrote %v", store.last())
	}
	lookups = 0
	call("t01234")
	m.SaveOwned()
	if got := store.last(); !slices.Equal(got, []string{"t01234"}) {
		t.Fatalf("charged again after it emptied: wrote %v", got)
	}
	if lookups > 3 {
		t.Errorf("the save looked up %d tenants for one that changed", lookups)
	}
}

// countingTenants counts limiter lookups.
type countingTenants struct {
	*memTenants
	lookups *int
}

func (c *countingTenants) Limiter(n string) *limiter.Tenant {
	*c.lookups++
	return c.memTenants.Limiter(n)
}

// TakeBack takes only the other node's own hand-over: while the other is
// busy with the tenant (its ring has just given it the tenant and it is
// asking for it) or cannot be reached, the tenant stays frozen for it,
// as it was, and nothing is held; then, with the other's hand-over there
// to take, it is taken whole.
func TestTakeBackOnlyTheOthersHandOver(t *testing.T) {
	c, tenant, b, cn := mutualFreeze(t)
	bl, cl := b.mt.Limiter(tenant), cn.mt.Limiter(tenant)
	for _, tc := range []struct {
		name       string
		setup, end func()
	}{
		{"busy", func() { b.mt.Hold(tenant, time.Second) }, func() { b.mt.Release(tenant) }},
		{"unreachable", func() { c.net.Partition("b", true) }, func() { c.net.Partition("b", false) }},
	} {
		tc.setup()
		took := cn.m.TakeBack(tenant, "b")
		tc.end()
		if took {
			t.Fatalf("%s: took the tenant back", tc.name)
		}
		if cl.MovedTo() != "b" || cn.mt.Held(tenant) {
			t.Fatalf("%s: c frozen for %q, held %v; want still frozen for b, not held", tc.name, cl.MovedTo(), cn.mt.Held(tenant))
		}
		if bl.MovedTo() != "c" {
			t.Fatalf("%s: b frozen for %q, want c (nothing handed)", tc.name, bl.MovedTo())
		}
	}
	if !cn.m.TakeBack(tenant, "b") {
		t.Fatal("did not take b's hand-over")
	}
	if cl.MovedTo() != "" {
		t.Fatalf("c still frozen for %q after the take-back", cl.MovedTo())
	}
	if got, _ := admitN(cl, c.clk.Now(), 100); got != 70 {
		t.Fatalf("c admitted %d after taking the tenant back, want the 70 left", got)
	}
}

// A late final snapshot is taken for lateFor after a takeover; the
// limiter replays what it applied since an Import for at least
// limiter.LateAccountHorizon, so that a late final never undoes a release
// made in between, whatever the window (with a 2 s window it did).
func TestLateFinalsWithinLimiterHorizon(t *testing.T) {
	if lateFor+time.Second > limiter.LateAccountHorizon {
		t.Fatalf("late finals are taken for %v, the limiter replays for %v", lateFor, limiter.LateAccountHorizon)
	}
}
