package router

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/router/internal/adminview"
)

// A node keeps its last adminview.KeptRebalances ring changes for the status page,
// oldest first, stamped by its clock.
func TestNoteRebalanceKeepsTheLast(t *testing.T) {
	cfg := config.Default()
	cfg.Tenants = []config.Tenant{{Name: "acme", Keys: []string{"key-acme"}, RPM: 100, Priority: "interactive"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	clk := clockwork.NewFakeClockAt(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	r, err := New(Options{Config: cfg, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	for v := range uint64(adminview.KeptRebalances + 5) {
		r.NoteRebalance(Rebalance{RingVersion: v + 1, Moved: 1})
	}
	got := r.adminServe.rebalances.List()
	if len(got) != adminview.KeptRebalances || got[0].RingVersion != 6 || got[len(got)-1].RingVersion != adminview.KeptRebalances+5 {
		t.Fatalf("kept %d, from ring %d to %d", len(got), got[0].RingVersion, got[len(got)-1].RingVersion)
	}
	if !got[0].At.Equal(clk.Now()) {
		t.Fatalf("stamped %s, want the router's clock's %s", got[0].At, clk.Now())
	}
}
