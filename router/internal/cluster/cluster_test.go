package cluster

import (
	"slices"
	"testing"
)

// A view's lookups: members sorted by name, the live count never below 1,
// and only the other members that cannot reach this node cutting it off.
func TestBuild(t *testing.T) {
	v := Build(View{Members: []Member{
		{Name: "c", Addr: "c:1", CannotReachSelf: true},
		{Name: "a", Addr: "a:1", CannotReachSelf: true},
		{Name: "b", Addr: "b:1"},
	}}, "a")
	if got := v.Names(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("names %v", got)
	}
	if a, ok := v.Addr("b"); !ok || a != "b:1" {
		t.Errorf("b's address %q %v", a, ok)
	}
	if v.LiveMembers() != 3 || v.CutBy() != 1 || v.Owner("acme") != "" || v.Version() != 0 {
		t.Errorf("live %d, cut by %d, owner %q, version %d", v.LiveMembers(), v.CutBy(), v.Owner("acme"), v.Version())
	}
	if n := Build(View{}, "a").LiveMembers(); n != 1 {
		t.Errorf("an empty view's live members: %d", n)
	}
	var none *Lookup
	if none.LiveMembers() != 1 || none.Owner("acme") != "" || none.Names() != nil {
		t.Error("no view does not answer as a standalone node")
	}
}

// A member that left is recorded until it comes back; one never seen is
// not.
func TestDeparted(t *testing.T) {
	var d Departed
	ab := Build(View{Members: []Member{{Name: "a"}, {Name: "b"}}}, "a")
	a := Build(View{Members: []Member{{Name: "a"}}}, "a")
	d.Note(nil, ab)
	if d.Has("b") || d.Has("z") || MembersLeft(ab, ab) {
		t.Fatal("departed before leaving")
	}
	d.Note(ab, a)
	if !d.Has("b") || !MembersLeft(ab, a) || MembersLeft(a, ab) {
		t.Fatal("b's leaving is not recorded")
	}
	d.Note(a, ab)
	if d.Has("b") {
		t.Fatal("b came back and is still departed")
	}
}
