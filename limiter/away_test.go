package limiter

import (
	"slices"
	"testing"
	"time"
)

// Slots know which node runs the call: a state handed over counts the
// writer's calls as the writer's, their ends release them there, and when
// the writer is gone its slots go at once.
func TestSlotsAwayOnTheirNode(t *testing.T) {
	l := Limits{Concurrency: 4}
	prev := NewTenant(l, time.Minute, time.Hour)
	var tks []Ticket
	for range 3 {
		tk, d := prev.Admit(t0, 0)
		if !d.Allowed {
			t.Fatal("prev refused")
		}
		tks = append(tks, tk)
	}
	st := prev.Freeze(t0+1, "n2")
	st.Holder = "n1"

	owner := NewTenant(l, time.Minute, time.Hour)
	owner.Import(t0+2, st.As("n2"))
	if u := owner.Usage(t0 + 2); u.InFlight != 3 {
		t.Fatalf("owner counts %d slots after the handoff, want 3", u.InFlight)
	}
	if _, d := owner.Admit(t0+2, 0); !d.Allowed {
		t.Fatal("the fourth slot is refused")
	}
	if _, d := owner.Admit(t0+2, 0); d.Allowed {
		t.Fatal("a fifth slot admitted over concurrency 4")
	}
	// One of n1's calls ends there and is reported.
	d, handed := prev.FinishOrHand(t0+3, &tks[0], 0)
	if !handed {
		t.Fatal("a frozen tenant's finish was not handed over")
	}
	owner.ApplyFrom(t0+3, "n1", d)
	if u := owner.Usage(t0 + 3); u.InFlight != 3 {
		t.Fatalf("after n1 released one: %d in flight, want 3", u.InFlight)
	}
	// n1 dies with its other two calls.
	if freed := owner.DropNode(t0+4, "n1"); freed != 2 {
		t.Fatalf("dropping n1 freed %d slots, want 2", freed)
	}
	if u := owner.Usage(t0 + 4); u.InFlight != 1 {
		t.Fatalf("after n1 died: %d in flight, want 1 (the owner's own)", u.InFlight)
	}
	// A late release from the dead node changes nothing.
	d2, _ := prev.FinishOrHand(t0+5, &tks[1], 0)
	owner.ApplyFrom(t0+5, "n1", d2)
	if u := owner.Usage(t0 + 5); u.InFlight != 1 {
		t.Fatalf("a release from a dropped node changed the count: %d", u.InFlight)
	}
	if got := owner.AwayNodes(); len(got) != 0 {
		t.Fatalf("away nodes %v after the drop", got)
	}
}

// A state coming back to the node whose calls it lists as away counts them
// as its own again.
func TestStateAsHomeNode(t *testing.T) {
	w := WindowState{Width: 10, Head: 5, Buckets: []Bucket{{Index: 5, Value: 2}}}
	st := State{Slots: w, Away: []NodeSlots{{Node: "n1", Slots: w}, {Node: "n3", Slots: w}}, Holder: "n2"}
	got := st.As("n1")
	if len(got.Slots.Buckets) != 1 || got.Slots.Buckets[0].Value != 2 {
		t.Fatalf("n1's own slots not home: %+v", got.Slots)
	}
	if len(got.Away) != 2 || got.Away[0].Node != "n2" || got.Away[1].Node != "n3" {
		t.Fatalf("away %+v, want n2 (the holder) and n3", got.Away)
	}
	if same := st.As("n2"); len(same.Away) != 2 || same.Holder != "" {
		t.Fatalf("a state as its own holder changed: %+v", same)
	}
}

// Replace swaps the other nodes' slots node by node: a node the better
// account says runs nothing is forgotten, one it says runs calls counts
// them, and a node neither account names keeps what it holds.
func TestReplaceSwapsAwaySlots(t *testing.T) {
	l := Limits{Concurrency: 10}
	held := func(node string, n int) State {
		prev := NewTenant(l, time.Minute, time.Hour)
		for range n {
			prev.Admit(t0, 0)
		}
		st := prev.Export(t0)
		st.Holder = node
		return st.As("self")
	}
	cases := []struct {
		name          string
		stale, better State
		want          int64
		wantAway      []string
	}{
		{"ended since the stale account", held("a", 3), held("a", 0), 1 + 2, []string{"b"}},
		{"started since the stale account", held("a", 0), held("a", 4), 1 + 2 + 4, []string{"a", "b"}},
		{"fewer running", held("a", 3), held("a", 1), 1 + 2 + 1, []string{"a", "b"}},
		{"another node's account", held("a", 3), held("c", 2), 1 + 2 + 2, []string{"b", "c"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			owner := NewTenant(l, time.Minute, time.Hour)
			owner.Import(t0, tc.stale)
			owner.Admit(t0, 0) // its own call
			for range 2 {      // two calls of b, an edge's, reported
				tk := owner.Tally(t0, 0)
				owner.ApplyFrom(t0, "b", DeltaOf(&tk))
			}
			owner.Replace(t0+1, tc.stale, tc.better)
			if u := owner.Usage(t0 + 1); u.InFlight != tc.want {
				t.Errorf("in flight %d, want %d", u.InFlight, tc.want)
			}
			if got := owner.AwayNodes(); !slices.Equal(got, tc.wantAway) {
				t.Errorf("away nodes %v, want %v", got, tc.wantAway)
			}
		})
	}
}
