package provider

import (
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/upstream"
)

// The ringgate_lease_* series carry the labels docs/operations.md names:
// budget, and dimension where a series is per dimension.
func TestCollectorLabels(t *testing.T) {
	cfg, err := config.Parse([]byte(learnedReloadTOML), "labels.toml")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ls := New(Config{Leaser: lease.NewLeaser(lease.LeaserConfig{Node: "n1", Logger: log}),
		Clock: clockwork.NewRealClock(), Log: log, Members: func() int { return 1 }})
	ls.Build(cfg, []*upstream.Provider{{}})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(ls.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"ringgate_lease_left": {"budget", "dimension"}, "ringgate_lease_grants_total": {"budget"},
		"ringgate_lease_queued": {"budget", "class"}}
	for _, mf := range mfs {
		labels, ok := want[mf.GetName()]
		if !ok {
			continue
		}
		delete(want, mf.GetName())
		var got []string
		for _, lp := range mf.GetMetric()[0].GetLabel() {
			got = append(got, lp.GetName())
		}
		if !slices.Equal(got, labels) {
			t.Errorf("%s: labels %v, want %v", mf.GetName(), got, labels)
		}
	}
	if len(want) > 0 {
		t.Errorf("not collected: %v", want)
	}
}
