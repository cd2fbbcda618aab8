package node

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/internal/redistest"
)

// An upstream serving two models, configured with a limit for the whole
// upstream only, in front of a provider whose key allows each model less
// (a lower tier, a key shared with others): the limits its answers state
// for each model become learned budgets of those models, so after the
// first two windows at most 2 % of the calls reach the provider only to be
// refused, and each model is used at 0.85 or more of its true limit.
func TestClusterLearnsModelLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const window = 2 * time.Second
	const other = "gpt-4o"
	truth := map[string]int{clModel: 60, other: 90}
	srv := redistest.Start(t)
	c, tenants := startProviderCluster(t, srv, window, func(u *config.Upstream) {
		u.RPM = 300
		u.Models = []string{clModel, other}
	}, fakeupstream.ProviderLimits{Window: window - window/128 - clJitter, Models: map[string]fakeupstream.ModelLimits{
		clModel: {Requests: int64(truth[clModel])}, other: {Requests: int64(truth[other])},
	}}, 5*time.Millisecond)
	modelOf := map[string]string{}
	for i, tn := range tenants {
		modelOf[tn.Name] = []string{clModel, other}[i%2]
	}
	c.body = func(tenant string, stream bool) []byte {
		return []byte(fmt.Sprintf(`{"model":%q,"user":%q,"max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`, modelOf[tenant], tenant))
	}
	// Twice each model's true limit: three tenants a model.
	start := time.Now().Add(50 * time.Millisecond)
	dur := 6 * window
	done := make(chan []clResult, len(tenants))
	for i, tn := range tenants {
		interval := window * 3 / time.Duration(2*truth[modelOf[tn.Name]])
		go func() {
			done <- c.clLoad(tn.Name, c.live(), i, start.Add(time.Duration(i)*interval/time.Duration(len(tenants))), interval, dur, 64)
		}()
	}
	var res []clResult
	for range tenants {
		res = append(res, <-done...)
	}
	codes := answersOf(t, res)
	from := start.Add(2 * window)
	reached, refused := 0, 0
	got := map[string][]time.Time{}
	for _, r := range c.fake.Records() {
		if r.Received.Before(from) || !r.Received.Before(start.Add(dur)) {
			continue
		}
		reached++
		if r.RateLimited {
			refused++
			continue
		}
		got[r.Model] = append(got[r.Model], r.Received)
	}
	t.Logf("answers %v; after the first two windows %d reached the provider, %d refused by it (%.1f %%)",
		codes, reached, refused, 100*float64(refused)/float64(max(1, reached)))
	if float64(refused) > 0.02*float64(reached) {
		t.Errorf("the provider refused %d of %d calls after the first two windows, want ≤ 2 %%", refused, reached)
	}
	for m, limit := range truth {
		used := float64(len(got[m])) * float64(window) / float64(start.Add(dur).Sub(from)) / float64(limit)
		least := -1
		for at := from; !at.Add(window).After(start.Add(dur)); at = at.Add(window / 8) {
			if n := clCountIn(got[m], at, at.Add(window)); least < 0 || n < least {
				least = n
			}
		}
		t.Logf("%s: %.2f of its true %d a window used, %d in the emptiest window", m, used, limit, least)
		if used < 0.85 {
			t.Errorf("%s used at %.2f of its true limit, want ≥ 0.85", m, used)
		}
	}
	// Each node that called the provider for a model shows its learned
	// limit in /upstreams.
	for _, nd := range c.live() {
		resp, err := c.hc.Get("http://" + nd.Addr() + "/upstreams?local=1")
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Upstreams []struct {
				Models map[string]struct {
					Learned *struct {
						Requests int64  `json:"requests"`
						From     string `json:"from"`
					} `json:"learned"`
				} `json:"models"`
			} `json:"upstreams"`
		}
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if err != nil || len(v.Upstreams) != 1 {
			t.Fatalf("/upstreams of %s: %v", nd.Name(), err)
		}
		for m, limit := range truth {
			l := v.Upstreams[0].Models[m].Learned
			if l == nil {
				continue // it owns no tenant of that model
			}
			if l.Requests != int64(limit) || l.From != "x-ratelimit-limit-requests" {
				t.Errorf("%s learned %s's limit %+v, want %d from x-ratelimit-limit-requests", nd.Name(), m, *l, limit)
			}
		}
	}
}
