package node

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringgate/ringgate/internal/redistest"
)

// A standalone node restarted on the same config continues its tenants'
// windows from Redis instead of handing every tenant a fresh window: the
// drain writes final snapshots and the next process loads them.
func TestStandaloneRestartKeepsUsage(t *testing.T) {
	rds := redistest.Start(t)
	_, upAddr := startBenchFake(t)
	cfg := benchConfig("solo", upAddr)
	cfg.Tenants[0].RPM = 5
	cfg.Limits.Window = time.Minute
	cfg.Redis.Addr = rds.Addr()
	cfg.Redis.Timeout = 100 * time.Millisecond
	cfg.Redis.SnapshotInterval = 100 * time.Millisecond
	cfg.Redis.HandoffWait = 100 * time.Millisecond
	cfg.Node.DrainTimeout = 5 * time.Second

	logs := &clLog{}
	start := func() *Node {
		n, err := Start(cfg, Options{Logger: slog.New(slog.NewJSONHandler(logs, nil)), DrainGrace: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	post := func(n *Node) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+n.Addr()+"/v1/chat/completions", strings.NewReader(benchBody))
		req.Header.Set("Authorization", "Bearer "+benchKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}

	first := start()
	for i := 0; i < 3; i++ {
		if s := post(first); s != http.StatusOK {
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
		got = append(got, post(second))
	}
	// 3 of 5 were used before the restart: 2 more fit, the third is refused.
	if fmt.Sprint(got) != "[200 200 429]" {
		t.Fatalf("after the restart: %v, want [200 200 429]\n%s", got, logs.String())
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
}
