package router

import (
	"strings"
	"testing"
	"time"
)

// A request whose headers the owner would take when sent straight to it is
// taken when an edge hands it over too: a hop carries only what the owner
// acts on, not the client's other headers plus its own. With all of them
// copied, a 3.7 KiB cookie once left no room for the hop's headers in the
// owner's 4 KiB header buffer (502 owner_failed or 400).
func TestHopCarriesOnlyWhatTheOwnerReads(t *testing.T) {
	c := newPartCluster(t, 100, 2*time.Second)
	members := []Member{{Name: "a", Addr: c.addr["a"], State: "active"}, {Name: "b", Addr: c.addr["b"], State: "active"},
		{Name: "o", Addr: c.addr["o"], State: "active"}}
	for _, r := range c.r {
		r.SetView(View{Ring: c.ring, Members: members})
	}
	cookie := map[string]string{"Cookie": "c=" + strings.Repeat("a", 3760)}
	if got := c.postWith(t, "o", cookie); got != 200 {
		t.Fatalf("sent to the owner: %d, want 200", got)
	}
	for i := range 3 {
		if got := c.postWith(t, "a", cookie); got != 200 {
			t.Fatalf("request %d handed to the owner: %d, want 200 as when sent to it", i, got)
		}
	}
	if n := len(c.fake.Records()); n != 4 {
		t.Errorf("the provider saw %d requests, want 4", n)
	}
}
