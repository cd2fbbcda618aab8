package router_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/ringgate/ringgate/config"
)

// Two tenants of one team: together never above the team's limit, each
// within its own; a request the team refuses is charged on neither (all
// or none), and the 429 names the team.
func TestTeamSharesItsLimit(t *testing.T) {
	const team, own = 10, 7
	a, b := tenantCfg("alpha", own, 1_000_000_000, 100), tenantCfg("beta", own, 1_000_000_000, 100)
	a.Team, b.Team = "research", "research"
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{a, b},
		teams:   []config.Team{{Name: "research", RPM: team, Mode: config.ModeEnforce}},
	})
	ok := map[string]int{}
	var teamRefusal reply
	for i := range 2 * own {
		for _, name := range []string{"alpha", "beta"} {
			r := e.post("/v1/chat/completions", keyOf(name), chatBody(openAIModel, 5, false, false), nil)
			switch r.status {
			case http.StatusOK:
				ok[name]++
			case http.StatusTooManyRequests:
				if strings.Contains(string(r.body), "team research") {
					teamRefusal = r
				}
			default:
				t.Fatalf("%s #%d: %s", name, i, r)
			}
		}
	}
	t.Logf("admitted: %v", ok)
	if ok["alpha"]+ok["beta"] != team || ok["alpha"] > own || ok["beta"] > own {
		t.Errorf("admitted %v: want %d in all (the team's limit), at most %d each", ok, team, own)
	}
	if n := len(e.fake.Records()); n != team {
		t.Errorf("the provider got %d requests, want %d", n, team)
	}
	if teamRefusal.status == 0 {
		t.Fatal("no 429 named the team")
	}
	checkErrorShape(t, teamRefusal, "rate_limit_exceeded")
	if got := teamRefusal.header.Get("x-ratelimit-remaining-requests"); got != "0" {
		t.Errorf("a team refusal reports %q requests left, want 0 (the tightest limit)", got)
	}
	// All or none: each tenant's window holds only what it was admitted.
	for _, name := range []string{"alpha", "beta"} {
		v, err := e.tenant(name)
		if err != nil || v.Requests.Used != int64(ok[name]) {
			t.Errorf("%s: window holds %d requests (%v), want the %d admitted", name, v.Requests.Used, err, ok[name])
		}
	}
	r := e.get("/teams/research", "")
	if r.status != http.StatusOK {
		t.Fatalf("/teams/research: %s", r)
	}
	var tv struct {
		Name     string `json:"name"`
		Owner    string `json:"owner"`
		Requests struct {
			Used, Limit int64
		} `json:"requests"`
		Tenants map[string]struct {
			Requests struct{ Used int64 } `json:"requests"`
		} `json:"tenants"`
	}
	if err := json.Unmarshal(r.body, &tv); err != nil {
		t.Fatal(err)
	}
	if tv.Requests.Used != team || tv.Requests.Limit != team || len(tv.Tenants) != 2 ||
		tv.Tenants["alpha"].Requests.Used != int64(ok["alpha"]) || tv.Owner == "" {
		t.Errorf("/teams/research: %s", r.body)
	}
	if r := e.get("/teams/nope", ""); r.status != http.StatusNotFound {
		t.Errorf("/teams/nope: %s, want 404", r)
	}
	if r := e.get("/tenants/team/research", ""); r.status != http.StatusNotFound {
		t.Errorf("/tenants/team/research: %s, want 404 (a team is not a tenant)", r)
	}
}

// A tenant's limit on one model holds while its other models pass; the
// headers report the tightest limit that applies.
func TestModelLimitHoldsWhileOthersPass(t *testing.T) {
	const modelRPM = 4
	acme := tenantCfg("acme", 100, 1_000_000_000, 100)
	acme.ModelLimits = []config.ModelLimit{{Model: "gpt-4o", RPM: modelRPM}}
	e := newEnv(t, envConfig{tenants: []config.Tenant{acme}})
	got := map[string][2]int{} // model -> admitted, refused
	for range 10 {
		for _, model := range []string{"gpt-4o", openAIModel} {
			r := e.post("/v1/chat/completions", keyOf("acme"), chatBody(model, 5, false, false), nil)
			g := got[model]
			switch r.status {
			case http.StatusOK:
				g[0]++
				if model == "gpt-4o" {
					if lim := r.header.Get("x-ratelimit-limit-requests"); lim != fmt.Sprint(modelRPM) {
						t.Errorf("gpt-4o answer reports limit %q, want the model's %d", lim, modelRPM)
					}
				} else if lim := r.header.Get("x-ratelimit-limit-requests"); lim != "100" {
					t.Errorf("%s answer reports limit %q, want the tenant's 100", model, lim)
				}
			case http.StatusTooManyRequests:
				g[1]++
				if !strings.Contains(string(r.body), "model gpt-4o") {
					t.Errorf("model refusal does not name the model: %s", r.body)
				}
			default:
				t.Fatalf("%s: %s", model, r)
			}
			got[model] = g
		}
	}
	if g := got["gpt-4o"]; g != [2]int{modelRPM, 10 - modelRPM} {
		t.Errorf("gpt-4o: %v admitted/refused, want %d/%d", g, modelRPM, 10-modelRPM)
	}
	if g := got[openAIModel]; g != [2]int{10, 0} {
		t.Errorf("%s: %v admitted/refused, want all 10 in", openAIModel, g)
	}
	byModel := map[string]int{}
	for _, rec := range e.fake.Records() {
		byModel[rec.Model]++
	}
	if byModel["gpt-4o"] != modelRPM || byModel[openAIModel] != 10 {
		t.Errorf("the provider got %v, want %d gpt-4o and 10 %s", byModel, modelRPM, openAIModel)
	}
	v, err := e.tenant("acme")
	if err != nil || v.Requests.Used != 10+modelRPM {
		t.Errorf("acme's window holds %d (%v), want %d: refused model calls charged nothing", v.Requests.Used, err, 10+modelRPM)
	}
}

// A team in shadow mode refuses nothing: what it would have refused is
// marked and counted, exactly what the same team enforced refuses under
// the same load; the team's window counts what enforcement admits.
func TestTeamShadowCountsWhatEnforcementRefuses(t *testing.T) {
	const team, sent = 5, 12
	got := map[string][3]int{} // mode -> served, refused, marked
	for _, mode := range []string{config.ModeEnforce, config.ModeShadow} {
		a := tenantCfg("alpha", 100, 1_000_000_000, 100)
		a.Team = "research"
		e := newEnv(t, envConfig{
			tenants: []config.Tenant{a},
			teams:   []config.Team{{Name: "research", RPM: team, Mode: mode}},
		})
		g := shadowRun(t, e, "alpha", sent)
		got[mode] = g
		metrics := string(e.get("/metrics", "").body)
		want := fmt.Sprintf(`ringgate_shadow_refusals_total{dimension="requests",tenant="team/research"} %d`, g[2])
		if mode == config.ModeShadow && !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
		var tv struct {
			Requests struct{ Used int64 } `json:"requests"`
		}
		if r := e.get("/teams/research", ""); json.Unmarshal(r.body, &tv) != nil || tv.Requests.Used != team {
			t.Errorf("%s: the team's window holds %d, want the %d enforcement admits", mode, tv.Requests.Used, team)
		}
	}
	t.Logf("served/refused/marked: %v", got)
	if en, sh := got[config.ModeEnforce], got[config.ModeShadow]; en != [3]int{team, sent - team, 0} || sh != [3]int{sent, 0, en[1]} {
		t.Errorf("enforced %v, shadow %v: want %v and %v", en, sh, [3]int{team, sent - team, 0}, [3]int{sent, 0, sent - team})
	}
}

// An upstream's limit in shadow mode serves everything and marks and
// counts exactly what the same limit enforced refuses under the same load.
func TestUpstreamShadowCountsWhatEnforcementRefuses(t *testing.T) {
	const rpm, sent = 3, 8
	got := map[string][3]int{} // mode -> served, refused, marked
	for _, mode := range []string{config.ModeEnforce, config.ModeShadow} {
		e := newEnv(t, envConfig{
			tenants: []config.Tenant{tenantCfg("acme", 100, 1_000_000_000, 100)},
			openAI:  func(u *config.Upstream) { u.RPM, u.Mode = rpm, mode },
		})
		g := shadowRun(t, e, "acme", sent)
		got[mode] = g
		metrics := string(e.get("/metrics", "").body)
		if mode == config.ModeShadow {
			want := fmt.Sprintf(`ringgate_shadow_refusals_total{dimension="requests",tenant="upstream/openai"} %d`, g[1]+g[2])
			if !strings.Contains(metrics, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	}
	t.Logf("served/refused/marked: %v", got)
	if en, sh := got[config.ModeEnforce], got[config.ModeShadow]; en != [3]int{rpm, sent - rpm, 0} || sh != [3]int{sent, 0, en[1]} {
		t.Errorf("enforced %v, shadow %v: want %v and %v", en, sh, [3]int{rpm, sent - rpm, 0}, [3]int{sent, 0, sent - rpm})
	}
}

// shadowRun sends n chat completions for tenant and counts the answers:
// served, refused, and marked x-ringgate-shadow-refused: requests.
func shadowRun(t *testing.T, e *env, tenant string, n int) [3]int {
	t.Helper()
	var g [3]int
	for range n {
		r := e.post("/v1/chat/completions", keyOf(tenant), chatBody(openAIModel, 5, false, false), nil)
		switch r.status {
		case http.StatusOK:
			g[0]++
		case http.StatusTooManyRequests:
			g[1]++
		default:
			t.Fatalf("%s: %s", tenant, r)
		}
		if r.header.Get("x-ringgate-shadow-refused") == "requests" {
			g[2]++
		}
	}
	return g
}
