package metrics

import (
	"fmt"
	"strings"
	"testing"
)

// TestTenantSeriesBounded: past MaxTenantSeries tenants, the others count
// together as "_other", and what they count is all there.
func TestTenantSeriesBounded(t *testing.T) {
	m := New()
	const n = MaxTenantSeries + 50
	for i := range n {
		m.Tenant(fmt.Sprintf("t%05d", i)).Allowed.Inc()
	}
	if got := len(m.tenants); got != MaxTenantSeries+1 {
		t.Fatalf("%d tenants with series of their own, want %d and %q", got, MaxTenantSeries, OtherTenants)
	}
	if m.Tenant("t00000") == m.Tenant(OtherTenants) || m.Tenant(fmt.Sprintf("t%05d", n-1)) != m.Tenant(OtherTenants) {
		t.Fatal("the first tenants keep their series, the later ones share _other")
	}
	mfs, err := m.Reg.Gather()
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
