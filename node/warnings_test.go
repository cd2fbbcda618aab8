package node

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
)

// startLogged starts a standalone node of cfg and returns its log lines
// once it has started, then closes it.
func startLogged(t *testing.T, cfg *config.Config) []map[string]any {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logs := &clLog{}
	n, err := Start(cfg, Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	_ = n.Close()
	return logs.entries()
}

func warnLines(entries []map[string]any, msg string) []map[string]any {
	var out []map[string]any
	for _, e := range entries {
		if e["msg"] == msg && e["level"] == "WARN" {
			out = append(out, e)
		}
	}
	return out
}

func TestStartLogsConfigWarnings(t *testing.T) {
	cfg := config.Default()
	cfg.Node.Listen, cfg.Node.Gossip = "127.0.0.1:0", ""
	if got := warnLines(startLogged(t, cfg), "config"); len(got) != 0 {
		t.Fatalf("a plain standalone node logged %v, want no config warning", got)
	}
	cfg.Limits.SpilloverRPS = 10
	got := warnLines(startLogged(t, cfg), "config")
	if len(got) != 1 || got[0]["key"] != "limits.spillover_rps" || got[0]["detail"] == "" {
		t.Errorf("config warnings = %v, want one on limits.spillover_rps", got)
	}
}

func TestStartWarnsWhenRedisDoesNotAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing answers there now
	cfg := config.Default()
	cfg.Node.Listen, cfg.Node.Gossip, cfg.Redis.Addr = "127.0.0.1:0", "", addr
	start := time.Now()
	entries := startLogged(t, cfg)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("start took %v with Redis down, want it not to wait for Redis", took)
	}
	got := warnLines(entries, "redis")
	if len(got) != 1 || got[0]["phase"] != "unreachable" || got[0]["detail"] == "" {
		t.Errorf("redis warnings = %v, want one unreachable", got)
	}
}

func TestReloadLogsWarningsOfReloadedTables(t *testing.T) {
	cfg := config.Default()
	cfg.Node.Listen, cfg.Node.Join = "127.0.0.1:0", nil // gossip, nothing to join: warned at start
	cfg.Cluster.Secret = make([]byte, 32)
	cfg.Node.Gossip = "127.0.0.1:0"
	next := *cfg
	next.Limits.SpilloverRPS = 10
	logs := &clLog{}
	n, err := Start(cfg, Options{Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		Source: func() (*config.Config, error) { return &next, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if got := warnLines(logs.entries(), "config"); len(got) != 1 || got[0]["key"] != "node.join" {
		t.Fatalf("start: config warnings = %v, want one on node.join", got)
	}
	if res := n.ReloadFromSource("test"); !res.OK {
		t.Fatalf("reload: %s", res.Error)
	}
	got := warnLines(logs.entries(), "config")[1:]
	if len(got) != 1 || got[0]["key"] != "limits.spillover_rps" {
		t.Errorf("reload: config warnings = %v, want one on limits.spillover_rps (node.join is read at start only)", got)
	}
}
