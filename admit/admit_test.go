package admit

import (
	"slices"
	"testing"
)

// room is a source of room with a fixed number of slots, recording what
// was taken and given back.
type room struct {
	name   string
	free   int
	shadow bool
	say    Verdict // when not Refused: said instead of refusing
	log    *[]string
}

func (r *room) Take() Verdict {
	if r.free > 0 {
		r.free--
		*r.log = append(*r.log, "take "+r.name)
		return Taken
	}
	if r.shadow {
		return Shadowed
	}
	if r.say != Taken {
		return r.say
	}
	return Refused
}

func (r *room) Cancel() {
	r.free++
	*r.log = append(*r.log, "cancel "+r.name)
}

func TestDecideAllOrNone(t *testing.T) {
	var log []string
	a := &room{name: "provider", free: 1, log: &log}
	b := &room{name: "tenant", free: 1, log: &log}
	c := &room{name: "team", free: 0, log: &log}
	o := Decide([]Room{a, b, c})
	if o.Verdict != Refused || o.At != 2 || o.Shadowed {
		t.Fatalf("outcome %+v, want refused at 2", o)
	}
	if a.free != 1 || b.free != 1 {
		t.Fatalf("free after a refusal: %d %d, want everything given back", a.free, b.free)
	}
	want := []string{"take provider", "take tenant", "cancel tenant", "cancel provider"}
	if !slices.Equal(log, want) {
		t.Fatalf("log %q, want %q (taken back last first)", log, want)
	}
}

func TestDecideTakesEveryRoom(t *testing.T) {
	var log []string
	rooms := []Room{&room{name: "a", free: 1, log: &log}, &room{name: "b", free: 1, log: &log}}
	if o := Decide(rooms); o.Verdict != Taken || o.At != 2 || o.Shadowed {
		t.Fatalf("outcome %+v, want taken at 2", o)
	}
	if o := Decide(rooms); o.Verdict != Refused || o.At != 0 {
		t.Fatalf("second decision %+v, want refused at 0 (room a is full)", o)
	}
}

func TestDecideShadowGoesOn(t *testing.T) {
	var log []string
	o := Decide([]Room{&room{name: "a", shadow: true, log: &log}, &room{name: "b", free: 1, log: &log}})
	if o.Verdict != Taken || !o.Shadowed {
		t.Fatalf("outcome %+v, want taken and shadowed", o)
	}
	if !slices.Equal(log, []string{"take b"}) {
		t.Fatalf("log %q: the shadowing room must charge nothing", log)
	}
}

func TestDecideStopsAtBehindAndMoved(t *testing.T) {
	for _, v := range []Verdict{Behind, Moved} {
		var log []string
		a := &room{name: "a", free: 1, log: &log}
		b := &room{name: "b", say: v, log: &log}
		late := &room{name: "late", free: 1, log: &log}
		o := Decide([]Room{a, b, late})
		if o.Verdict != v || o.At != 1 {
			t.Fatalf("%v: outcome %+v", v, o)
		}
		if a.free != 1 || late.free != 1 {
			t.Fatalf("%v: a room charged after the decision ended", v)
		}
	}
}

func BenchmarkDecide(b *testing.B) {
	var log []string
	rooms := []Room{&room{name: "a", log: &log}, &room{name: "b", log: &log}, &room{name: "c", log: &log}}
	for b.Loop() {
		for _, r := range rooms {
			r.(*room).free = 1
		}
		log = log[:0]
		Decide(rooms)
	}
}
