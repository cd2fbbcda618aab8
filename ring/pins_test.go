package ring

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// A pinned name is owned with its key, on every ring, and moves with it.
func TestPinsPlaceByKey(t *testing.T) {
	three := New(1, []string{"a", "b", "c"})
	four := New(2, []string{"a", "b", "c", "d"})
	pins := Pins{}
	var tenants []string
	for i := range 200 {
		n := fmt.Sprintf("tenant-%d", i)
		tenants = append(tenants, n)
		pins[n] = "team/x"
	}
	p3, p4 := three.WithPins(pins), four.WithPins(pins)
	team3, _ := p3.Owner("team/x")
	team4, _ := p4.Owner("team/x")
	for _, n := range tenants {
		if o, _ := p3.Owner(n); o != team3 {
			t.Fatalf("%s owned by %s, its team by %s", n, o, team3)
		}
	}
	moved := Moved(p3, p4, tenants)
	if team3 == team4 && len(moved) != 0 || team3 != team4 && len(moved) != len(tenants) {
		t.Fatalf("team %s -> %s, but %d of %d pinned tenants moved", team3, team4, len(moved), len(tenants))
	}
	// Pinning alone moves the names whose key's owner differs.
	unpinned := Moved(three, p3, tenants)
	for _, n := range unpinned {
		if o, _ := three.Owner(n); o == team3 {
			t.Fatalf("%s moved by pinning, but its owner was already the team's", n)
		}
	}
	if len(unpinned) == 0 {
		t.Fatal("200 tenants pinned to one key, none moved: pins not applied")
	}
}

// SetPins builds a ring of the same members with the pins and reports it
// as a change; the same pins again change nothing.
func TestTableSetPins(t *testing.T) {
	changes := make(chan [2]*Ring, 8)
	tb := NewTable("a", 5*time.Millisecond, func(from, to *Ring) { changes <- [2]*Ring{from, to} })
	defer tb.Close()
	tb.SetPins(Pins{"early": "k"}) // no ring yet: kept for the first
	tb.Update([]string{"a", "b", "c"})
	tb.Flush()
	first := <-changes
	if !first[1].samePins(Pins{"early": "k"}) {
		t.Fatal("the first ring lost the pins set before it")
	}
	pins := Pins{"t1": "team/x", "t2": "team/x"}
	tb.SetPins(pins)
	tb.Flush()
	select {
	case c := <-changes:
		if !slices.Equal(c[0].Members(), c[1].Members()) || c[1].Version() != c[0].Version()+1 {
			t.Fatalf("repin: members %v -> %v, version %d -> %d", c[0].Members(), c[1].Members(), c[0].Version(), c[1].Version())
		}
		o1, _ := c[1].Owner("t1")
		ok, _ := c[1].Owner("team/x")
		if o1 != ok {
			t.Fatalf("t1 owned by %s, its key by %s", o1, ok)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no ring change for new pins")
	}
	tb.SetPins(Pins{"t1": "team/x", "t2": "team/x"})
	tb.Update([]string{"c", "b", "a"}) // same members too
	tb.Flush()
	select {
	case c := <-changes:
		t.Fatalf("same pins and members gave a change to version %d", c[1].Version())
	case <-time.After(50 * time.Millisecond):
	}
}

// New pins followed at once by the same members (gossip's next event):
// the ring with the pins is still built, after the debounce.
func TestTableSetPinsThenSameMembers(t *testing.T) {
	changes := make(chan [2]*Ring, 8)
	tb := NewTable("a", 20*time.Millisecond, func(from, to *Ring) { changes <- [2]*Ring{from, to} })
	defer tb.Close()
	tb.Update([]string{"a", "b", "c"})
	<-changes
	tb.SetPins(Pins{"t": "k"})
	tb.Update([]string{"c", "a", "b"})
	select {
	case c := <-changes:
		if !c[1].samePins(Pins{"t": "k"}) {
			t.Fatalf("v%d without the pins", c[1].Version())
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the same members cancelled the ring the pins asked for")
	}
}
