package router_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/internal/knownlimit"
)

// Known limits (docs/limits.md), found by a reviewer; run with
// RINGGATE_KNOWN_LIMITS=1. A stream cut before its end (its client gone)
// frees the provider's slot once ringgate has closed the upstream
// connection, but the provider learns of the close only at its next write:
// a call queued for the slot can reach it first. With a concurrency of 1 on
// both sides, the provider refused the second call (429).

// A stream whose client leaves before the provider's first byte: the
// provider's slot is held (providerHeld) until the provider's answer
// headers, then freed as the unread stream is dropped.
func TestKnownLimitStreamCutFreesProviderSlotBeforeProviderStops(t *testing.T) {
	knownlimit.Only(t)
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("sgone", 1000, 1_000_000, 10)},
		fake: fakeupstream.Options{Latency: 600 * time.Millisecond, ChunkInterval: 150 * time.Millisecond,
			CompletionMin: 20, CompletionMax: 20,
			Limits: fakeupstream.ProviderLimits{Concurrency: 1}},
		queue:  &config.Queue{InteractiveWait: 5 * time.Second, BatchWait: 5 * time.Second, MaxDepth: 10},
		openAI: func(u *config.Upstream) { u.Concurrency = 1 },
	})
	e.hangUpRaw(keyOf("sgone"), "/v1/chat/completions", chatBody(openAIModel, 0, true, true),
		func() bool { return len(e.fake.Records()) == 1 })
	e.waitTenant("sgone", "the tenant's slot freed", func(v tenantView) bool { return v.InFlight.Used == 0 })
	if got := e.upstreamSlotsInFlight(); got != 1 {
		t.Fatalf("provider slots in flight after the hang-up: %d, want 1 (held while the provider runs)", got)
	}
	// Waits for the provider's slot (the queue), sent when it frees.
	r := e.post("/v1/chat/completions", keyOf("sgone"), chatBody(openAIModel, 0, false, false), nil)
	t.Logf("the next request: %d", r.status)
	recs := e.waitRecords(2)
	for i, rec := range recs {
		t.Logf("record %d: status %d received %v", i, rec.Status, rec.Received.Format("15:04:05.000"))
	}
	if st := e.fake.Stats(); st.ConcurrencyBreaches > 0 || r.status == http.StatusTooManyRequests {
		t.Errorf("the provider refused %d call(s) for its concurrency (next request %d): ringgate sent the queued call while the gone stream still ran at the provider",
			st.ConcurrencyBreaches, r.status)
	}
	if !poll(settleWait, func() bool { return e.upstreamSlotsInFlight() == 0 }) {
		t.Errorf("provider slots in flight %d after both calls ended", e.upstreamSlotsInFlight())
	}
}

// The same on the ordinary path (stream()): a stream its client cuts after
// the first event.
func TestKnownLimitStreamCutMidwayProviderSlot(t *testing.T) {
	knownlimit.Only(t)
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("scut", 1000, 1_000_000, 10)},
		fake: fakeupstream.Options{ChunkInterval: 150 * time.Millisecond,
			CompletionMin: 20, CompletionMax: 20,
			Limits: fakeupstream.ProviderLimits{Concurrency: 1}},
		queue:  &config.Queue{InteractiveWait: 5 * time.Second, BatchWait: 5 * time.Second, MaxDepth: 10},
		openAI: func(u *config.Upstream) { u.Concurrency = 1 },
	})
	resp := e.openStream("/v1/chat/completions", keyOf("scut"), chatBody(openAIModel, 0, true, true), nil)
	buf := make([]byte, 64)
	_, _ = resp.Body.Read(buf)
	done := make(chan reply, 1)
	go func() {
		done <- e.post("/v1/chat/completions", keyOf("scut"), chatBody(openAIModel, 0, false, false), nil)
	}()
	time.Sleep(200 * time.Millisecond) // queued for the slot
	resp.Body.Close()
	r := <-done
	if st := e.fake.Stats(); st.ConcurrencyBreaches > 0 || r.status == http.StatusTooManyRequests {
		t.Errorf("the provider refused %d call(s) for its concurrency (next request %d): the cut stream still ran there",
			st.ConcurrencyBreaches, r.status)
	}
}
