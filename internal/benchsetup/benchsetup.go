// Package benchsetup is the set-up the benchmarks share: a zero-latency fake
// provider on loopback and a standalone node's config with one tenant whose
// limits never bind, and the request they send. It knows nothing of what a
// benchmark measures.
package benchsetup

import (
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/reserve"
)

const (
	// Tenant is the one tenant of Config, Key its key.
	Tenant = "bench"
	Key    = "sk-bench"
	// Body is a small JSON chat request for Config's upstream, StreamBody
	// the same asking for a stream.
	Body       = `{"model":"gpt-4o-mini","max_tokens":20,"messages":[{"role":"user","content":"hello there"}]}`
	StreamBody = `{"model":"gpt-4o-mini","max_tokens":20,"stream":true,"messages":[{"role":"user","content":"hello there"}]}`
)

// Fake starts a zero-latency fake provider that stops when tb ends, and
// returns it with its address.
func Fake(tb testing.TB) (*fakeupstream.Server, string) {
	tb.Helper()
	tok, err := reserve.NewTokenizer()
	if err != nil {
		tb.Fatalf("tokenizer: %v", err)
	}
	fake := fakeupstream.New(fakeupstream.Options{
		CompletionMin: 20, CompletionMax: 20, CountTokens: tok.Count,
		// Records are kept for audits; a benchmark needs few of them, and
		// keeping them all would grow the heap with b.N.
		MaxRecords: 1000,
	})
	addr, err := fake.Start("127.0.0.1:0")
	if err != nil {
		tb.Fatalf("start fake upstream: %v", err)
	}
	tb.Cleanup(func() {
		if err := fake.Close(); err != nil {
			tb.Errorf("close fake upstream: %v", err)
		}
	})
	return fake, addr
}

// Config is a standalone node's config (no gossip, no Redis) named name, in
// front of the fake provider at upAddr, with Tenant's limits out of reach.
func Config(name, upAddr string) *config.Config {
	cfg := config.Default()
	cfg.Node.Name = name
	cfg.Node.Listen = "127.0.0.1:0"
	cfg.Node.Gossip = "" // standalone
	cfg.Limits.Window = 60 * time.Second
	cfg.Upstreams = []config.Upstream{{
		Name: "fake", Kind: config.KindOpenAI, BaseURL: "http://" + upAddr,
		Models:         []string{"gpt-4o-mini"},
		Timeout:        10 * time.Second,
		ConnectTimeout: time.Second, StreamIdleTimeout: 10 * time.Second,
		AnthropicVersion: config.DefaultAnthropicVersion,
	}}
	cfg.Tenants = []config.Tenant{{
		Name: Tenant, Keys: []string{Key},
		RPM: 1 << 30, TPM: 1 << 30, Concurrency: 1 << 30,
		Priority: config.PriorityInteractive,
	}}
	return cfg
}
