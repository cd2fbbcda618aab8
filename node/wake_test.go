package node

// A node catching up after a pause (wake.go) steps out of the ring and back
// in; a tenant nobody took over meanwhile comes back with this node's own
// account of it, not with the state a peer froze for it long ago.
//
//	go test -race -count=1 -run TestWake ./node/

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/ringgate/ringgate/ring"
)

func TestWakeCatchUpKeepsOwnAccount(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of gossip or load: not in -short")
	}
	const window = 2 * time.Second
	// A tenant n3 owns: n3 joined last, so the node that owned it before
	// froze it for n3 then, and owns it again in the ring without n3.
	rg := ring.New(1, []string{"n1", "n2", "n3"})
	tenant := ""
	for i := 0; tenant == ""; i++ {
		if o, _ := rg.Owner(fmt.Sprintf("wk%02d", i)); o == "n3" {
			tenant = fmt.Sprintf("wk%02d", i)
		}
	}
	c := startCluster(t, 3, window, clTenant(tenant, 1000))
	o := c.byName(c.owner(tenant))
	if o.Name() != "n3" {
		t.Fatalf("%s is owned by %s, want n3", tenant, o.Name())
	}
	time.Sleep(window + 500*time.Millisecond) // the start-up hand-over leaves the window
	const sent = 5
	for i := range sent {
		if rep, err := c.post(o, tenant, false, nil); err != nil || rep.status != http.StatusOK {
			t.Fatalf("request %d: %v %v", i, rep, err)
		}
	}
	before := usedRequests(t, c, o, tenant)

	start := time.Now()
	o.catchUp(2 * time.Second) // as the watchdog does after a 2 s gap
	took := time.Since(start)
	c.waitConverged(5 * time.Second)
	after := usedRequests(t, c, o, tenant)
	t.Logf("caught up in %v; %s's requests in the window on %s: %d before, %d after", took.Round(time.Millisecond), tenant, o.Name(), before, after)
	if after < before {
		t.Errorf("after the catch-up %s counts %d requests of %s in the window, want its own %d", o.Name(), after, tenant, before)
	}
	if len(o.log.find(map[string]any{"msg": "wake", "phase": "caught_up"})) != 1 {
		t.Errorf("no wake caught_up log line")
	}
	if st, err := c.getStatus(o, "/readyz"); err != nil || st != http.StatusOK {
		t.Errorf("/readyz after the catch-up: %d %v", st, err)
	}
	for _, nd := range c.live() {
		rep, err := c.post(nd, tenant, false, nil)
		if err != nil || rep.status != http.StatusOK || rep.node != o.Name() {
			t.Errorf("via %s after the catch-up: %v %v, want 200 from %s", nd.Name(), rep, err, o.Name())
		}
	}
}
