package router_test

// A reload (SIGHUP) that changes limits.window or limits.slot_ttl keeps what
// the windows counted and the slots and reservations of calls in flight:
// the tenant's limiter is rebucketed to the new widths, not started afresh.

import (
	"bufio"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
)

// reloadEnv reloads e's node with a copy of its config changed by edit.
func reloadEnv(t *testing.T, e *env, edit func(*config.Config)) {
	t.Helper()
	next := *e.cfg
	edit(&next)
	next.Node.Gossip = "127.0.0.1:0" // as newEnv validates it
	if err := next.Validate(); err != nil {
		t.Fatalf("reloaded config does not validate: %v", err)
	}
	next.Node.Gossip = "" // standalone, as newEnv runs it
	if err := e.node.Reload(&next); err != nil {
		t.Fatalf("reload: %v", err)
	}
}

// A tenant at its limit is still refused after a reload to another window:
// what it was admitted counts in the new window too.
func TestReloadNewWindowKeepsUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		window  time.Duration
		slotTTL time.Duration // 0: unchanged
	}{
		{"longer window", 2 * time.Minute, 0},
		{"shorter window", 30 * time.Second, 0},
		{"shorter window and slot ttl", 20 * time.Second, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const rpm = 3
			e := newEnv(t, envConfig{tenants: []config.Tenant{tenantCfg("acme", rpm, 1_000_000, 10)}})
			body := chatBody(openAIModel, 5, false, false)
			for i := range rpm {
				if r := e.post("/v1/chat/completions", keyOf("acme"), body, nil); r.status != http.StatusOK {
					t.Fatalf("request %d: %s", i, r)
				}
			}
			if r := e.post("/v1/chat/completions", keyOf("acme"), body, nil); r.status != http.StatusTooManyRequests {
				t.Fatalf("at the limit before the reload: want 429, got %s", r)
			}

			reloadEnv(t, e, func(c *config.Config) {
				c.Limits.Window = tc.window
				if tc.slotTTL > 0 {
					c.Limits.SlotTTL = tc.slotTTL
				}
			})
			r := e.post("/v1/chat/completions", keyOf("acme"), body, nil)
			if r.status != http.StatusTooManyRequests {
				t.Fatalf("after the reload: want 429 (the %d requests admitted before it count in the new window), got %s", rpm, r)
			}
			checkErrorShape(t, r, "rate_limit_exceeded")
			// Room comes back one new window after the requests were
			// admitted, give or take the buckets, old and new, kept whole.
			slack := e.cfg.Limits.Window/128 + tc.window/128 + 100*time.Millisecond
			if ra := retryAfterMs(r.header); ra <= tc.window-15*time.Second || ra > tc.window+slack {
				t.Errorf("retry-after-ms %v after a reload to a %v window", ra, tc.window)
			}
			if n := len(e.fake.Records()); n != rpm {
				t.Errorf("upstream saw %d requests, want %d", n, rpm)
			}
			v, err := e.tenant("acme")
			if err != nil {
				t.Fatal(err)
			}
			if v.Window != tc.window.String() || v.Requests.Used != rpm || v.InFlight.Used != 0 {
				t.Errorf("after the reload: %+v, want window %s with the %d requests counted", v, tc.window, rpm)
			}
		})
	}
}

// A stream admitted before a reload that changes the window and the slot
// TTL keeps its slot after it, and when it ends it frees the slot and
// settles its tokens in the tenant's windows as they are now.
func TestReloadStreamInFlightKeepsSlot(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of load")
	}
	t.Parallel()
	const chunks = 100 // 2 s
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("acme", 1000, 1_000_000, 1)},
		fake:    fakeupstream.Options{ChunkInterval: 20 * time.Millisecond, CompletionMin: chunks, CompletionMax: chunks},
	})
	resp := e.openStream("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 0, true, false), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	for {
		ev, err := readEvent(br)
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		if chunkText(t, ev) != "" {
			break
		}
	}
	before, err := e.tenant("acme")
	if err != nil {
		t.Fatal(err)
	}

	reloadEnv(t, e, func(c *config.Config) {
		c.Limits.Window = 20 * time.Second
		c.Limits.SlotTTL = 2 * time.Minute
	})
	v, err := e.tenant("acme")
	if err != nil {
		t.Fatal(err)
	}
	if v.Window != "20s" || v.InFlight.Used != 1 || v.Requests.Used != 1 || v.Tokens.Used != before.Tokens.Used {
		t.Fatalf("after the reload, the stream still in flight: %+v, want its slot, request and reservation (%d tokens) counted",
			v, before.Tokens.Used)
	}
	small := chatBody(openAIModel, 5, false, false)
	if r := e.post("/v1/chat/completions", keyOf("acme"), small, nil); r.status != http.StatusTooManyRequests {
		t.Fatalf("second request during the stream, after the reload: want 429 (concurrency 1), got %s", r)
	}

	evs := readAllEvents(t, br)
	if len(evs) == 0 || evs[len(evs)-1].data != "[DONE]" {
		t.Fatalf("stream did not end with [DONE] (%d events)", len(evs))
	}
	rec := e.waitRecords(1)[0]
	// The slot is free again and the reservation settled to the usage.
	e.waitSettled("acme", int64(rec.PromptTokens+rec.CompletionTokens))
	if r := e.post("/v1/chat/completions", keyOf("acme"), small, nil); r.status != http.StatusOK {
		t.Fatalf("request after the stream ended: %s", r)
	}
}

// A tenant a reload removed and a later reload put back goes on with what
// its window counted (it once started from nothing: its limit twice in a
// window, for a tenant removed by mistake and restored).
func TestReloadRemovedTenantPutBackKeepsUsage(t *testing.T) {
	t.Parallel()
	const rpm = 3
	acme := tenantCfg("acme", rpm, 1_000_000, 10)
	e := newEnv(t, envConfig{tenants: []config.Tenant{acme, tenantCfg("globex", rpm, 1_000_000, 10)}})
	body := chatBody(openAIModel, 5, false, false)
	for i := range rpm {
		if r := e.post("/v1/chat/completions", keyOf("acme"), body, nil); r.status != http.StatusOK {
			t.Fatalf("request %d: %s", i, r)
		}
	}
	reloadEnv(t, e, func(c *config.Config) {
		c.Tenants = slices.DeleteFunc(slices.Clone(c.Tenants), func(tc config.Tenant) bool { return tc.Name == "acme" })
	})
	if r := e.post("/v1/chat/completions", keyOf("acme"), body, nil); r.status != http.StatusUnauthorized {
		t.Fatalf("removed: want 401, got %s", r)
	}
	reloadEnv(t, e, func(*config.Config) {}) // e.cfg: acme is back
	r := e.post("/v1/chat/completions", keyOf("acme"), body, nil)
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("put back: want 429 (its %d requests count), got %s", rpm, r)
	}
	if n := len(e.fake.Records()); n != rpm {
		t.Errorf("upstream saw %d requests, want %d", n, rpm)
	}
}
