package reqlog

import (
	"strings"
	"testing"
)

func TestSane(t *testing.T) {
	for _, c := range []struct {
		id   string
		sane bool
	}{
		{"req-123", true},
		{"0f8fad5b-d9cb-469f-a165-70867728950e", true},
		{strings.Repeat("a", MaxID), true},
		{"", false},
		{strings.Repeat("a", MaxID+1), false},
		{"has space", false},
		{"tab\there", false},
		{"new\nline", false},
		{"caf\xc3\xa9", false},
	} {
		if got := Sane([]byte(c.id)); got != c.sane {
			t.Errorf("Sane(%q) = %v, want %v", c.id, got, c.sane)
		}
	}
}

// Ids are distinct, sane, and cost no allocation in a buffer of their
// size.
func TestMakerIDs(t *testing.T) {
	m, other := NewMaker(), NewMaker()
	seen := map[string]bool{}
	for range 1000 {
		id := string(m.Append(nil))
		if seen[id] || !Sane([]byte(id)) {
			t.Fatalf("id %q: seen %v, sane %v", id, seen[id], Sane([]byte(id)))
		}
		seen[id] = true
	}
	if a, b := string(m.Append(nil)), string(other.Append(nil)); a[:16] == b[:16] {
		t.Errorf("two processes' prefixes agree: %q, %q", a, b)
	}
	var buf [40]byte
	if n := testing.AllocsPerRun(100, func() { _ = m.Append(buf[:0]) }); n != 0 {
		t.Errorf("%v allocations an id, want 0", n)
	}
}
