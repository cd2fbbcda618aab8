package router_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/ringgate/ringgate/config"
)

// The same load on a tenant enforced and on one in shadow mode: the shadow
// tenant is refused nothing, and what it was let through past its limit
// is exactly what the enforced one was refused, by header and by metric;
// its window counts what enforcement admitted, no more.
func TestShadowCountsWhatEnforcementRefuses(t *testing.T) {
	const rpm, sent = 10, 25
	enforced := tenantCfg("enforced", rpm, 1_000_000_000, 100)
	shadow := tenantCfg("shadow", rpm, 1_000_000_000, 100)
	shadow.Mode = config.ModeShadow
	e := newEnv(t, envConfig{tenants: []config.Tenant{enforced, shadow}})
	type result struct{ ok, refused, marked int }
	got := map[string]*result{}
	for _, name := range []string{"enforced", "shadow"} {
		res := &result{}
		got[name] = res
		for range sent {
			r := e.post("/v1/chat/completions", keyOf(name), chatBody(openAIModel, 5, false, false), nil)
			switch r.status {
			case http.StatusOK:
				res.ok++
			case http.StatusTooManyRequests:
				res.refused++
			default:
				t.Fatalf("%s: %s", name, r)
			}
			if v := r.header.Get("x-ringgate-shadow-refused"); v != "" {
				if v != "requests" {
					t.Errorf("x-ringgate-shadow-refused: %q, want requests", v)
				}
				res.marked++
			}
		}
	}
	t.Logf("enforced: %+v; shadow: %+v", *got["enforced"], *got["shadow"])
	if g := got["enforced"]; g.ok != rpm || g.refused != sent-rpm || g.marked != 0 {
		t.Errorf("enforced: %+v, want %d admitted, %d refused, none marked", *g, rpm, sent-rpm)
	}
	if g := got["shadow"]; g.ok != sent || g.refused != 0 || g.marked != got["enforced"].refused {
		t.Errorf("shadow: %+v, want all %d served, %d marked (what enforcement refused)", *g, sent, got["enforced"].refused)
	}
	metrics := string(e.get("/metrics", "").body)
	want := fmt.Sprintf(`ringgate_shadow_refusals_total{dimension="requests",tenant="shadow"} %d`, sent-rpm)
	if !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %s", want)
	}
	if strings.Contains(metrics, `ringgate_shadow_refusals_total{dimension="requests",tenant="enforced"}`) {
		t.Error("the enforced tenant has shadow refusals")
	}
	for _, name := range []string{"enforced", "shadow"} {
		v, err := e.tenant(name)
		if err != nil || v.Requests.Used != rpm {
			t.Errorf("%s: window holds %d requests (%v), want the %d enforcement admits", name, v.Requests.Used, err, rpm)
		}
	}
	if n := len(e.fake.Records()); n != rpm+sent {
		t.Errorf("the provider got %d requests, want %d", n, rpm+sent)
	}
	// Switched to enforcement by reload, the shadow tenant keeps its
	// usage: at its limit, it is refused now.
	reloadEnv(t, e, func(c *config.Config) {
		ts := append([]config.Tenant(nil), c.Tenants...)
		for i := range ts {
			ts[i].Mode = config.ModeEnforce
		}
		c.Tenants = ts
	})
	if r := e.post("/v1/chat/completions", keyOf("shadow"), chatBody(openAIModel, 5, false, false), nil); r.status != http.StatusTooManyRequests {
		t.Errorf("after the switch to enforce: %s, want 429 (its window holds %d of %d)", r, rpm, rpm)
	}
}
