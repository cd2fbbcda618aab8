package tenant

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/router/internal/metrics"
)

// ringgate_tenant_queued has series, one a class, for the tenants with
// requests waiting only, on the state in force when scraped.
func TestQueueCollector(t *testing.T) {
	clk := clockwork.NewFakeClock()
	now := func() int64 { return clk.Now().UnixNano() }
	var st atomic.Pointer[State]
	cs := NewCores(&st, Hooks{Spills: new(atomic.Int64)}, now, clk)
	cfg := config.Default()
	cfg.Tenants = []config.Tenant{{Name: "a", Keys: []string{"ka"}, RPM: 5}, {Name: "b", Keys: []string{"kb"}, RPM: 5}}
	s := build(t, &st, cs, metrics.New(), cfg, now())
	reg := prometheus.NewRegistry()
	reg.MustRegister(QueueCollector(st.Load))

	q := s.ByName["a"].Core().Queue
	_ = s.ByName["b"].Core() // served here, nobody waiting
	cancel := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = q.Wait(queue.Batch, queue.Flow{}, 10, clk.Now().Add(time.Hour), cancel, func() (bool, time.Duration) { return false, 0 })
	}()
	for q.Waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	if got := series(t, reg); got != "a batch 1,a interactive 0" {
		t.Errorf("one batch request of a waiting: %q", got)
	}
	close(cancel)
	<-done
	if got := series(t, reg); got != "" {
		t.Errorf("nobody waiting: %q", got)
	}
}

// series are reg's ringgate_tenant_queued series as "tenant class value",
// sorted.
func series(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "ringgate_tenant_queued" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			out = append(out, l["tenant"]+" "+l["class"]+" "+strconv.FormatFloat(m.GetGauge().GetValue(), 'f', -1, 64))
		}
	}
	return strings.Join(out, ",")
}
