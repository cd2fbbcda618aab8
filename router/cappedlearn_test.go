package router_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
)

// A tenant whose calls all set max_tokens 2000 and all run to it (long
// answers, truncated): none of them teaches the estimate any more, so each
// is reserved default_completion (256) in flight while the provider bills
// 2000. Before the commit they taught ~2000.
func TestCappedLongAnswersTeach(t *testing.T) {
	const maxTok = 2000
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("cap", 1000, 100_000_000, 10)},
		fake:    fakeupstream.Options{CompletionMin: 5000, CompletionMax: 5000, Latency: 150 * time.Millisecond},
	})
	for range 12 {
		if r := e.post("/v1/chat/completions", keyOf("cap"), chatBody(openAIModel, maxTok, false, false), nil); r.status != http.StatusOK {
			t.Fatalf("warm-up: %s", r)
		}
	}
	before, err := e.tenant("cap")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan reply, 1)
	go func() {
		done <- e.post("/v1/chat/completions", keyOf("cap"), chatBody(openAIModel, maxTok, false, false), nil)
	}()
	v := e.waitTenant("cap", "one call in flight", func(v tenantView) bool { return v.InFlight.Used == 1 })
	reserved := v.Tokens.Used - before.Tokens.Used
	<-done
	after := e.waitTenant("cap", "in_flight 0", func(v tenantView) bool { return v.InFlight.Used == 0 })
	t.Logf("after 12 calls that each ran to max_tokens %d: the 13th reserved %d tokens in flight, was charged %d",
		maxTok, reserved, after.Tokens.Used-before.Tokens.Used)
	if reserved < maxTok {
		t.Errorf("reserved %d for a call that, like every one before it, runs to its max_tokens %d", reserved, maxTok)
	}
}

// The burst it lets through: tpm 10 000, concurrency 10, calls that run to
// max_tokens 8 000. After one such call settled and left the window, 10 at
// once are each reserved default_completion and all admitted.
func TestCappedBurstHeldToTPM(t *testing.T) {
	const tpm, maxTok, burst = 10000, 8000, 10
	e := newEnv(t, envConfig{
		window:  2 * time.Second,
		tenants: []config.Tenant{tenantCfg("burst", 1000, tpm, burst)},
		fake:    fakeupstream.Options{CompletionMin: 20000, CompletionMax: 20000, Latency: 300 * time.Millisecond},
	})
	if r := e.post("/v1/chat/completions", keyOf("burst"), chatBody(openAIModel, maxTok, false, false), nil); r.status != http.StatusOK {
		t.Fatalf("first call: %s", r)
	}
	e.waitTenant("burst", "an empty window", func(v tenantView) bool { return v.InFlight.Used == 0 && v.Tokens.Used == 0 })
	done := make(chan int, burst)
	for range burst {
		go func() {
			done <- e.post("/v1/chat/completions", keyOf("burst"), chatBody(openAIModel, maxTok, false, false), nil).status
		}()
	}
	ok := 0
	for range burst {
		if <-done == http.StatusOK {
			ok++
		}
	}
	v := e.waitTenant("burst", "in_flight 0", func(v tenantView) bool { return v.InFlight.Used == 0 })
	t.Logf("%d of %d calls running to max_tokens %d admitted at once; the window holds %d tokens for a tpm of %d",
		ok, burst, maxTok, v.Tokens.Used, tpm)
	if int64(ok)*maxTok > 2*tpm {
		t.Errorf("admitted %d x %d completion tokens in one window for a tpm of %d", ok, maxTok, tpm)
	}
}
