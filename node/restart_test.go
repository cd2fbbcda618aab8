package node

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/internal/redistest"
)

// A standalone node restarted on the same config continues its tenants'
// windows from Redis instead of handing every tenant a fresh window: the
// drain writes final snapshots and the next process loads them. Redis in
// each shape production runs it (redis.addr, or redis.addrs with
// master_name, username, password and tls): a plain server, one with an
// ACL user over TLS only, a Cluster of three masters and a master watched
// by a Sentinel. The provider's limit is leased from the same Redis.
func TestStandaloneRestartKeepsUsage(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of gossip or load: not in -short")
	}
	shapes := []struct {
		name  string
		redis func(t *testing.T) config.Redis
	}{
		{"plain", func(t *testing.T) config.Redis { return config.Redis{Addr: redistest.Start(t).Addr()} }},
		{"acl-tls", func(t *testing.T) config.Redis {
			files := redistest.NewTLSFiles(t)
			srv := redistest.StartWith(t, redistest.Options{TLS: files, Args: []string{
				"--user", "default", "off", "--user", "ringgate", "on", ">s3cret", "~*", "&*", "+@all"}})
			return config.Redis{Addrs: []string{srv.Addr()}, Username: "ringgate", Password: "s3cret",
				TLS: true, TLSCAFile: files.CAFile, TLSServerName: "redis.test"}
		}},
		{"cluster", func(t *testing.T) config.Redis { return config.Redis{Addrs: redistest.StartCluster(t, 3).Addrs()} }},
		{"sentinel", func(t *testing.T) config.Redis {
			master := redistest.Start(t)
			return config.Redis{Addrs: []string{redistest.StartSentinel(t, master, "ringgate-master").Addr()}, MasterName: "ringgate-master"}
		}},
	}
	for _, shape := range shapes {
		t.Run(shape.name, func(t *testing.T) { restartKeepsUsage(t, shape.redis(t)) })
	}
}

func restartKeepsUsage(t *testing.T, rds config.Redis) {
	_, upAddr := startBenchFake(t)
	cfg := benchConfig("solo", upAddr)
	cfg.Tenants[0].RPM = 5
	cfg.Upstreams[0].RPM = 1000 // leased from Redis
	cfg.Limits.Window = time.Minute
	rds.Timeout = 100 * time.Millisecond
	rds.SnapshotInterval = 100 * time.Millisecond
	rds.HandoffWait = 100 * time.Millisecond
	cfg.Redis = rds
	cfg.Node.DrainTimeout = 5 * time.Second
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	logs := &clLog{}
	start := func() *Node {
		n, err := Start(cfg, Options{Logger: slog.New(slog.NewJSONHandler(logs, nil)), DrainGrace: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	first := start()
	for i := 0; i < 3; i++ {
		if s := postBench(t, first); s != http.StatusOK {
			t.Fatalf("request %d: status %d", i, s)
		}
	}
	if !first.Drain() {
		t.Fatal("drain did not finish")
	}

	second := start()
	defer second.Close()
	got := []int{}
	for i := 0; i < 3; i++ {
		got = append(got, postBench(t, second))
	}
	// 3 of 5 were used before the restart: 2 more fit, the third is refused.
	if fmt.Sprint(got) != "[200 200 429]" {
		t.Fatalf("after the restart: %v, want [200 200 429]\n%s", got, logs.String())
	}
	if got := warnLines(logs.entries(), "redis"); len(got) > 0 {
		t.Errorf("a Redis that answers was logged as unreachable: %v", got)
	}
	if !strings.Contains(logs.String(), `"redis_snapshot":1`) {
		t.Errorf("the restart did not log a final snapshot taken over:\n%s", logs.String())
	}
	resp, err := http.Get("http://" + second.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), "ringgate_snapshot_loaded_total 1") {
		t.Errorf("/metrics lacks the snapshot counters:\n%.2000s", metrics)
	}
	page := parseMetrics(string(metrics))
	grants, storeErrors := page.sum("ringgate_lease_grants_total"), page.sum("ringgate_lease_store_errors_total")
	t.Logf("the provider's budget: %v grants from Redis, %v store errors", grants, storeErrors)
	if grants < 1 || storeErrors != 0 {
		t.Errorf("the provider's budget got %v grants and %v store errors from Redis, want some and none", grants, storeErrors)
	}
}
