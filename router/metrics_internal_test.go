package router

import (
	"fmt"
	"strings"
	"testing"
)

// TestTenantSeriesBounded: past maxTenantSeries tenants, the others count
// together as "_other", and what they count is all there.
func TestTenantSeriesBounded(t *testing.T) {
	m := newMetrics()
	const n = maxTenantSeries + 50
	for i := range n {
		m.tenant(fmt.Sprintf("t%05d", i)).allowed.Inc()
	}
	if got := len(m.tenants); got != maxTenantSeries+1 {
		t.Fatalf("%d tenants with series of their own, want %d and %q", got, maxTenantSeries, otherTenants)
	}
	if m.tenant("t00000") == m.tenant(otherTenants) || m.tenant(fmt.Sprintf("t%05d", n-1)) != m.tenant(otherTenants) {
		t.Fatal("the first tenants keep their series, the later ones share _other")
	}
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total, other float64
	for _, mf := range mfs {
		if mf.GetName() != "ringgate_decisions_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			var tenant, result string
			for _, l := range mt.GetLabel() {
				switch l.GetName() {
				case "tenant":
					tenant = l.GetValue()
				case "result":
					result = l.GetValue()
				}
			}
			if result == "allowed" {
				total += mt.GetCounter().GetValue()
				if strings.HasPrefix(tenant, "_") {
					other += mt.GetCounter().GetValue()
				}
			}
		}
	}
	if total != n || other != 50 {
		t.Errorf("allowed %v in all, %v under _other; want %d and 50", total, other, n)
	}
}
