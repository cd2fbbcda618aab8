package router

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/reserve"
	"github.com/ringgate/ringgate/ring"
)

// hrPair is two routers on loopback, a (the edge) and b (the owner of
// tenant hrPair.tenant), in front of one fake provider.
type hrPair struct {
	a, b   *Router
	addrA  string
	addrB  string
	tenant string
	fake   *fakeupstream.Server
	hc     *http.Client
}

func newHRPair(t *testing.T) *hrPair {
	t.Helper()
	tok, err := reserve.NewTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	fake, upAddr := startFake(t, fakeupstream.Options{CountTokens: tok.Count, CompletionMin: 5, CompletionMax: 5})
	// A tenant the ring {a, b} gives to b.
	rg := ring.New(1, []string{"a", "b"})
	tenant := ""
	for i := 0; tenant == ""; i++ {
		if o, _ := rg.Owner(fmt.Sprintf("t%d", i)); o == "b" {
			tenant = fmt.Sprintf("t%d", i)
		}
	}
	secret := bytes.Repeat([]byte{7}, 32)
	mk := func(name string) (*Router, string) {
		cfg := config.Default()
		cfg.Node.Name = name
		cfg.Node.Gossip = "127.0.0.1:0" // clustered: owners come from the view
		cfg.Cluster.Secret = secret
		cfg.Cluster.HopSkew = 5 * time.Second
		cfg.Upstreams = []config.Upstream{{
			Name: "openai", Kind: config.KindOpenAI, BaseURL: "http://" + upAddr, Models: []string{"gpt-4o-mini"},
			Timeout: 10 * time.Second, ConnectTimeout: time.Second, StreamIdleTimeout: 10 * time.Second,
			AnthropicVersion: config.DefaultAnthropicVersion,
		}}
		cfg.Tenants = []config.Tenant{{Name: tenant, Keys: []string{"sk-" + tenant}, RPM: 100, TPM: 1 << 30,
			Concurrency: 100, Priority: config.PriorityInteractive}}
		r, err := New(Options{Config: cfg, Tokenizer: tok, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return r, serveRouter(t, r)
	}
	p := &hrPair{tenant: tenant, fake: fake, hc: &http.Client{Timeout: 10 * time.Second}}
	p.a, p.addrA = mk("a")
	p.b, p.addrB = mk("b")
	v := View{Ring: rg, Members: []Member{{Name: "a", Addr: p.addrA, State: "active"}, {Name: "b", Addr: p.addrB, State: "active"}}}
	p.a.SetView(v)
	p.b.SetView(v)
	return p
}

type hrReply struct {
	status     int
	node, code string
	retryAfter string
}

func (p *hrPair) post(t *testing.T, addr string) hrReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body := `{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/chat/completions", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk-"+p.tenant)
	resp, err := p.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &e)
	return hrReply{status: resp.StatusCode, node: resp.Header.Get("x-ringgate-node"), code: e.Error.Code, retryAfter: resp.Header.Get("Retry-After")}
}

// TestHopRefusedNotRelayed: a hop the owner refuses, because it arrives past
// hop_skew (the edge's clock 10 s behind the owner's here; after a pause,
// a hop that waited in the owner's backlog) or because the owner is
// catching up after a pause, reaches the client as the edge's 503 with
// Retry-After, never as a 401; nothing reaches the provider.
func TestHopRefusedNotRelayed(t *testing.T) {
	p := newHRPair(t)
	if r := p.post(t, p.addrA); r.status != http.StatusOK || r.node != "b" {
		t.Fatalf("a request via the edge with both clocks right: %+v, want 200 from b", r)
	}
	sent := len(p.fake.Records())

	p.a.hops = p.a.hops.WithClock(func() time.Time { return time.Now().Add(-10 * time.Second) })
	for i := range 3 {
		r := p.post(t, p.addrA)
		if r.status != http.StatusServiceUnavailable || r.code != "owner_unavailable" || r.node != "a" || r.retryAfter != "1" {
			t.Fatalf("stale hop %d: %+v, want 503 owner_unavailable from the edge a with Retry-After 1", i, r)
		}
	}
	if got := len(p.fake.Records()) - sent; got != 0 {
		t.Fatalf("%d refused hops reached the provider", got)
	}
	p.a.hops = p.a.hops.WithClock(time.Now)

	// The owner catching up after a pause refuses hops and client
	// requests alike.
	p.b.SetCatchingUp(true)
	if r := p.post(t, p.addrA); r.status != http.StatusServiceUnavailable || r.code != "owner_unavailable" || r.node != "a" {
		t.Fatalf("hop to an owner catching up: %+v, want 503 owner_unavailable from a", r)
	}
	if r := p.post(t, p.addrB); r.status != http.StatusServiceUnavailable || r.code != "not_ready" || r.retryAfter != "1" {
		t.Fatalf("client request to a node catching up: %+v, want 503 not_ready with Retry-After 1", r)
	}
	p.b.SetCatchingUp(false)

	// A watchdog silent for longer than the pause limit: the node has
	// just woken up and not noticed yet.
	p.b.SetPauseLimit(50 * time.Millisecond)
	time.Sleep(100 * time.Millisecond) // no heartbeat meanwhile: that is the pause
	if r := p.post(t, p.addrB); r.status != http.StatusServiceUnavailable || r.code != "not_ready" {
		t.Fatalf("client request after a silent watchdog: %+v, want 503 not_ready", r)
	}
	p.b.SetPauseLimit(time.Hour)
	if r := p.post(t, p.addrA); r.status != http.StatusOK || r.node != "b" {
		t.Fatalf("after the owner caught up: %+v, want 200 from b", r)
	}
	if got := len(p.fake.Records()) - sent; got != 1 {
		t.Fatalf("provider got %d requests after the first, want the 1 admitted at the end", got)
	}
}
