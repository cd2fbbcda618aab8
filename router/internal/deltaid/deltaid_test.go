package deltaid

import (
	"testing"

	"github.com/ringgate/ringgate/limiter"
)

// A delta is applied once per origin: sent again (its report's answer
// lost), it is skipped; the same ID from another origin, or an unnamed
// delta, passes. IDs are forgotten once older than keep, and only then.
func TestFreshSkipsDeltasSeenBefore(t *testing.T) {
	ids := New()
	a, b := ids.Name(limiter.Delta{}), ids.Name(limiter.Delta{})
	if a.ID == 0 || b.ID != a.ID+1 {
		t.Fatalf("IDs %d then %d", a.ID, b.ID)
	}
	const keep = 1000
	got := ids.Fresh("n1", 0, keep, []limiter.Delta{a, b})
	if len(got) != 2 {
		t.Fatalf("first report: %d of 2 applied", len(got))
	}
	got = ids.Fresh("n1", 10, keep, []limiter.Delta{a, {}, b})
	if len(got) != 1 || got[0].ID != 0 {
		t.Fatalf("report sent again: %+v applied, want the unnamed delta only", got)
	}
	if got = ids.Fresh("n2", 10, keep, []limiter.Delta{a}); len(got) != 1 {
		t.Fatal("an ID of another origin was skipped")
	}
	// Past pruneEvery IDs and keep, the old ones are forgotten.
	var many []limiter.Delta
	for range pruneEvery {
		many = append(many, ids.Name(limiter.Delta{}))
	}
	ids.Fresh("n1", keep/2, keep, many)
	if got = ids.Fresh("n1", keep/2, keep, []limiter.Delta{a}); len(got) != 0 {
		t.Fatal("an ID forgotten before keep")
	}
	ids.Fresh("n1", 2*keep, keep, []limiter.Delta{ids.Name(limiter.Delta{})})
	if got = ids.Fresh("n1", 2*keep, keep, []limiter.Delta{a}); len(got) != 1 {
		t.Fatal("an ID older than keep still remembered")
	}
}
