package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/internal/redistest"
)

// failoverShape is a Redis that survives its master's death: the config a
// node uses for it, the master to kill (the one holding the node's
// snapshot) and the replica that takes its place.
type failoverShape struct {
	redis   config.Redis
	master  *redistest.Server
	replica *redistest.Server
}

// TestRedisFailoverUnderLoad: a node whose Redis is a master with a
// replica, watched by a Sentinel (redis.addrs and redis.master_name), or a
// Redis Cluster of three masters with a replica each (redis.addrs), runs a
// tenant at four times its limit while the master holding its snapshot
// dies and its replica is promoted. Meanwhile the node decides in RAM:
// every answer is a 200 or a 429, never a 5xx, and the provider never sees
// more than the limit in a sliding window. Once the replica is master, the
// node's snapshots reach it again, with no restart: go-redis asks the
// Sentinel where the master went, or the Cluster where the slot is now.
func TestRedisFailoverUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis masters, replicas and a Sentinel")
	}
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) failoverShape
	}{
		{"sentinel", startSentinelShape},
		{"cluster", startClusterShape},
	} {
		t.Run(tc.name, func(t *testing.T) { redisFailoverUnderLoad(t, tc.start(t)) })
	}
}

func startSentinelShape(t *testing.T) failoverShape {
	const name = "rg-master"
	ctx := context.Background()
	master := redistest.Start(t)
	_, port, _ := net.SplitHostPort(master.Addr())
	replica := redistest.StartWith(t, redistest.Options{Args: []string{"--replicaof", "127.0.0.1", port}})
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	defer rc.Close()
	if !pollUntil(10*time.Second, func() bool {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	}) {
		t.Fatal("the replica's link to its master is not up")
	}
	sentinel := redistest.StartSentinel(t, master, name)
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr()})
	defer sc.Close()
	if !pollUntil(10*time.Second, func() bool {
		r, err := sc.Replicas(ctx, name).Result()
		return err == nil && len(r) == 1
	}) {
		t.Fatal("the Sentinel does not know the replica")
	}
	return failoverShape{redis: config.Redis{Addrs: []string{sentinel.Addr()}, MasterName: name}, master: master, replica: replica}
}

// startClusterShape starts a Cluster of 3 masters and 3 replicas, and picks
// the master of the bench tenant's snapshot key and that master's replica.
func startClusterShape(t *testing.T) failoverShape {
	ctx := context.Background()
	cl := redistest.StartClusterWithReplicas(t, 3, 1)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer cc.Close()
	mc, err := cc.MasterForKey(ctx, "ringgate:snap:{"+benchTenant+"}")
	if err != nil {
		t.Fatal(err)
	}
	sh := failoverShape{redis: config.Redis{Addrs: cl.Addrs()}, master: cl.ByAddr(mc.Options().Addr)}
	_, port, _ := net.SplitHostPort(mc.Options().Addr)
	for _, s := range cl.Servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		role, err := rc.Do(ctx, "ROLE").Slice()
		rc.Close()
		if err == nil && len(role) >= 3 && role[0] == "slave" && fmt.Sprint(role[2]) == port {
			sh.replica = s
		}
	}
	if sh.master == nil || sh.replica == nil {
		t.Fatalf("no master and replica for the snapshot key (master %s)", mc.Options().Addr)
	}
	return sh
}

func redisFailoverUnderLoad(t *testing.T, sh failoverShape) {
	const (
		rpm      = 20
		window   = 2 * time.Second
		interval = 25 * time.Millisecond // 80 a window: 4× the limit
		runFor   = 12 * time.Second
	)
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: sh.replica.Addr()})
	defer rc.Close()

	fake, upAddr := startBenchFake(t)
	cfg := benchConfig("solo", upAddr)
	cfg.Limits.Window = window
	cfg.Tenants[0].RPM = rpm
	cfg.Upstreams[0].RPM = 1000 // leased from Redis
	cfg.Redis = sh.redis
	cfg.Redis.Timeout, cfg.Redis.SnapshotInterval, cfg.Redis.HandoffWait = 100*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logs := &clLog{}
	n, err := Start(cfg, Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()

	var (
		mu    sync.Mutex
		codes = map[int]int{}
		ok    []time.Time // when a 200 was sent
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		// An open loop: a request waiting in the tenant's queue for room
		// delays no other.
		tick := time.NewTicker(interval)
		defer tick.Stop()
		deadline := time.Now().Add(runFor)
		for time.Now().Before(deadline) {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			wg.Go(func() {
				at := time.Now()
				code := postBench(t, n)
				mu.Lock()
				codes[code]++
				if code == http.StatusOK {
					ok = append(ok, at)
				}
				mu.Unlock()
			})
		}
	})
	defer func() { close(stop); wg.Wait() }()

	time.Sleep(1500 * time.Millisecond) // load runs meanwhile
	before := scrapeNode(t, n)
	killed := time.Now()
	sh.master.Kill()
	if !pollUntil(20*time.Second, func() bool {
		role, err := rc.Do(ctx, "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	}) {
		t.Fatal("the replica was not promoted within 20 s")
	}
	promoted := time.Since(killed)
	// go-redis finds the new master on its next failed call, the
	// Sentinel's +switch-master or the Cluster's MOVED; then saves
	// succeed again.
	atPromotion := scrapeNode(t, n)
	var atSwitch scraped
	if !pollUntil(5*time.Second, func() bool {
		atSwitch = scrapeNode(t, n)
		return atSwitch.sum("ringgate_snapshot_saved_total") > atPromotion.sum("ringgate_snapshot_saved_total")
	}) {
		t.Fatalf("no snapshot saved within 5 s of the replica's promotion (%v after the kill); Redis calls ok %v, failed %v; log:\n%s",
			promoted.Round(time.Millisecond), atSwitch.count(`ringgate_redis_calls_total{result="ok"}`), atSwitch.count(`ringgate_redis_calls_total{result="error"}`), logs.String())
	}
	switched := time.Since(killed)
	time.Sleep(time.Second)
	after := scrapeNode(t, n)
	close(stop)
	wg.Wait()
	stop = make(chan struct{}) // for the deferred close

	mu.Lock()
	defer mu.Unlock()
	t.Logf("master killed; replica promoted after %v, first snapshot saved after %v; answers %v; snapshots saved %v before the kill, %v a second after the switch; Redis calls ok %v → %v, failed %v → %v",
		promoted.Round(time.Millisecond), switched.Round(time.Millisecond), codes, before.sum("ringgate_snapshot_saved_total"), after.sum("ringgate_snapshot_saved_total"),
		atSwitch.count(`ringgate_redis_calls_total{result="ok"}`), after.count(`ringgate_redis_calls_total{result="ok"}`),
		atSwitch.count(`ringgate_redis_calls_total{result="error"}`), after.count(`ringgate_redis_calls_total{result="error"}`))
	for code, k := range codes {
		if code != http.StatusOK && code != http.StatusTooManyRequests {
			t.Errorf("%d answers %d: the node must decide in RAM while Redis fails over", k, code)
		}
	}
	if size, err := rc.DBSize(ctx).Result(); err != nil || size == 0 {
		t.Errorf("the new master holds %d keys (%v), want the node's snapshot", size, err)
	}
	if after.sum("ringgate_snapshot_saved_total") <= atSwitch.sum("ringgate_snapshot_saved_total") {
		t.Error("no snapshot saved in the second after the switch")
	}
	if e0, e1 := atSwitch.count(`ringgate_redis_calls_total{result="error"}`), after.count(`ringgate_redis_calls_total{result="error"}`); e1 > e0 {
		t.Errorf("%v Redis calls failed after the new master took snapshots\n%s", e1-e0, logs.String())
	}
	okDuring := 0
	for _, at := range ok {
		if at.After(killed) && at.Before(killed.Add(promoted)) {
			okDuring++
		}
	}
	if okDuring == 0 {
		t.Error("no request admitted while Redis failed over: the node must degrade, not fail closed")
	}
	times := clReceived(fake.Records())
	if w, at := clMaxSliding(times, window-clJitter); w > rpm {
		t.Errorf("%d requests reached the provider within %v (ending %+.2fs from the kill), limit %d",
			w, window-clJitter, at.Sub(killed).Seconds(), rpm)
	}
}

// postBench sends the bench tenant's chat request to n and returns the
// status (0 when the request failed).
func postBench(t *testing.T, n *Node) int {
	req, _ := http.NewRequest(http.MethodPost, "http://"+n.Addr()+"/v1/chat/completions", strings.NewReader(benchBody))
	req.Header.Set("Authorization", "Bearer "+benchKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Logf("post: %v", err)
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// scrapeNode reads n's /metrics.
func scrapeNode(t *testing.T, n *Node) scraped {
	t.Helper()
	resp, err := http.Get("http://" + n.Addr() + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return parseMetrics(string(body))
}
