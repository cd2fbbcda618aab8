package router

import (
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/router/internal/levels"
)

// A hop that waited in its tenant's line, once admitted, tells the edge
// what the tenant and its levels used (levels.UsedHeader), as a hop admitted
// at once does: the edge seeds its fallback shares from it.
func TestQueuedHopSendsLevelsUsed(t *testing.T) {
	fake, upAddr := startFake(t, fakeupstream.Options{Latency: time.Second, CompletionMin: 5, CompletionMax: 5})
	r, rg := queuedHopRouter(t, upAddr, func(cfg *config.Config) {
		cfg.Teams = []config.Team{{Name: "research", RPM: 1000}}
		cfg.Tenants[0].Team = "research"
	})
	first, done, resp := hopBehindCall(t, r, rg, 1)
	fake.SetOptions(fakeupstream.Options{CompletionMin: 5, CompletionMax: 5})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode() != fasthttp.StatusOK || len(resp.Header.Peek("x-ringgate-queued-ms")) == 0 {
		t.Fatalf("the hop: %d (queued %q) %s, want 200 after a wait", resp.StatusCode(), resp.Header.Peek("x-ringgate-queued-ms"), resp.Body())
	}
	used := string(resp.Header.Peek(levels.UsedHeader))
	if !strings.HasPrefix(used, "acme=2,") || !strings.Contains(used, ";team/research=2,") {
		t.Errorf("%s: %q, want the tenant's and the team's two requests", levels.UsedHeader, used)
	}
	if s := <-first; s != 200 {
		t.Errorf("the first call: %d, want 200", s)
	}
}
