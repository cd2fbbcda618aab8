package router_test

import (
	"net/http"
	"testing"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/internal/knownlimit"
)

// A known limit (docs/limits.md), a reviewer's; run with
// RINGGATE_KNOWN_LIMITS=1. A reload puts a tenant into an existing team. What the tenant was
// admitted in the current window (and its calls in flight) is not counted
// on the team: the team admits its whole limit on top, so the provider sees
// more of the team's members in one window than the team's rpm. (A limit
// lowered by a reload keeps the usage and refuses until the window drains.)
func TestKnownLimitTenantJoiningTeamBringsNoUsage(t *testing.T) {
	knownlimit.Only(t)
	const teamRPM = 4
	alpha, beta := tenantCfg("alpha", 100, 1_000_000_000, 100), tenantCfg("beta", 100, 1_000_000_000, 100)
	beta.Team = "research"
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{alpha, beta},
		teams:   []config.Team{{Name: "research", RPM: teamRPM, Mode: config.ModeEnforce}},
	})
	body := chatBody(openAIModel, 5, false, false)
	for i := range teamRPM {
		if r := e.post("/v1/chat/completions", keyOf("alpha"), body, nil); r.status != http.StatusOK {
			t.Fatalf("alpha #%d before the join: %s", i, r)
		}
	}
	reloadEnv(t, e, func(c *config.Config) {
		a := alpha
		a.Team = "research"
		c.Tenants = []config.Tenant{a, beta}
	})
	after := 0
	for range 2 * teamRPM {
		for _, name := range []string{"alpha", "beta"} {
			if r := e.post("/v1/chat/completions", keyOf(name), body, nil); r.status == http.StatusOK {
				after++
			}
		}
	}
	total := len(e.fake.Records())
	t.Logf("team research (rpm %d per 60s window): %d requests of its members before the join, %d after it, %d at the provider in one window",
		teamRPM, teamRPM, after, total)
	if total > teamRPM {
		t.Errorf("the provider got %d requests of team research's members within one window, team rpm %d", total, teamRPM)
	}
}
