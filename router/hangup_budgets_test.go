package router_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
)

// slotsBoth is this node's calls in flight on the first upstream's own
// budget and on its model's.
func (e *env) slotsBoth() (up, model int64) {
	e.t.Helper()
	type bv struct {
		Lease struct {
			SlotsInFlight int64 `json:"slots_in_flight"`
		} `json:"lease"`
	}
	var v struct {
		Upstreams []struct {
			Budget *bv            `json:"budget"`
			Models map[string]*bv `json:"models"`
		} `json:"upstreams"`
	}
	r := e.get("/upstreams", "")
	if err := json.Unmarshal(r.body, &v); err != nil || len(v.Upstreams) == 0 {
		e.t.Fatalf("GET /upstreams: %v in %s", err, r.body)
	}
	if b := v.Upstreams[0].Budget; b != nil {
		up = b.Lease.SlotsInFlight
	}
	if b := v.Upstreams[0].Models[openAIModel]; b != nil {
		model = b.Lease.SlotsInFlight
	}
	return up, model
}

// A call on two provider budgets (the upstream's and its model's) whose
// client hangs up, answered late by a 429 the budget
// learns from, by a JSON answer, or not at all (the upstream's timeout):
// both slots are held while the provider runs and freed once after (a
// reviewer's check of providerHeld).
func TestHangupTwoBudgetsHeldThenFreedOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		answer  func(w http.ResponseWriter)
	}{
		{"429 with rate-limit headers", 0, func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("x-ratelimit-limit-requests", "100")
			w.Header().Set("x-ratelimit-remaining-requests", "0")
			w.Header().Set("x-ratelimit-reset-requests", "1s")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"error":{"message":"slow down","type":"requests"}}`)
		}},
		{"JSON answer", 0, answerJSON},
		{"upstream timeout", 300 * time.Millisecond, answerJSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var arrived atomic.Int32
			base := slowUpstream(t, &arrived, 700*time.Millisecond, tc.answer)
			e := newEnv(t, envConfig{
				tenants:         []config.Tenant{tenantCfg("two", 1000, 1_000_000, 10)},
				upstreamTimeout: tc.timeout,
				openAI: func(u *config.Upstream) {
					u.BaseURL = base
					u.Concurrency = 3
					u.TPM = 10_000_000
					u.ModelLimits = []config.ModelLimit{{Model: openAIModel, Concurrency: 2, TPM: 10_000_000}}
				},
			})
			e.hangUpRaw(keyOf("two"), "/v1/chat/completions", chatBody(openAIModel, 0, false, false),
				func() bool { return arrived.Load() == 1 })
			e.waitTenant("two", "tenant slot freed", func(v tenantView) bool { return v.InFlight.Used == 0 })
			if up, model := e.slotsBoth(); up != 1 || model != 1 {
				t.Errorf("while the provider runs: slots %d (upstream), %d (model), want 1 and 1", up, model)
			}
			var up, model int64
			if !poll(settleWait, func() bool { up, model = e.slotsBoth(); return up == 0 && model == 0 }) {
				t.Fatalf("after the answer: slots %d (upstream), %d (model), want 0", up, model)
			}
			time.Sleep(200 * time.Millisecond)
			if up, model = e.slotsBoth(); up != 0 || model != 0 {
				t.Fatalf("later: slots %d (upstream), %d (model), want 0", up, model)
			}
		})
	}
}
