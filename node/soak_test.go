package node

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/internal/redistest"
	"github.com/ringgate/ringgate/reserve"
)

// soakEnv sets how long the soak runs (a Go duration); unset, it is skipped.
// make soak runs it for 5 minutes.
const soakEnv = "RINGGATE_SOAK"

// A 3-node cluster with Redis under a steady mixed load (JSON and streams,
// every tenant at twice its limits, through every node) for the time
// RINGGATE_SOAK says. Sampled every 10 s and at the end, once the load has
// stopped: the process's goroutines and live heap come back to where they
// were after the first minute (no leak per request), and no tenant holds
// a slot on any node (no call left counted in flight).
func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv(soakEnv))
	if err != nil || d <= 0 {
		t.Skipf("set %s to a duration (make soak: 5m) to run the soak", soakEnv)
	}
	const window, rpm = 10 * time.Second, 200
	srv := redistest.Start(t)
	var tenants []config.Tenant
	for i := range 6 {
		tn := clTenant(fmt.Sprintf("soak-%d", i), rpm)
		tn.Concurrency = 4
		tenants = append(tenants, tn)
	}
	c := startClusterWith(t, 3, window, clOptions{Redis: srv.Addr(), RedisTimeout: auditRedisTimeout}, tenants...)
	// The fake provider shares the process: it keeps the last records
	// only, or its list (~45 B a request) would read as the nodes' leak.
	tok, _ := reserve.NewTokenizer()
	c.fake.SetOptions(fakeupstream.Options{CountTokens: tok.Count, CompletionMin: 20, CompletionMax: 40,
		Latency: 5 * time.Millisecond, MaxRecords: 1000})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i, tn := range tenants {
		wg.Go(func() {
			tick := time.NewTicker(window / (2 * rpm))
			defer tick.Stop()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				nd := c.live()[(i+k)%3]
				rep, err := c.post(nd, tn.Name, k%4 == 0, nil)
				mu.Lock()
				if err != nil {
					codes[0]++
				} else {
					codes[rep.status]++
				}
				mu.Unlock()
			}
		})
	}
	type sample struct {
		at         time.Duration
		goroutines int
		heapMiB    float64
	}
	measure := func(at time.Duration) sample {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return sample{at, runtime.NumGoroutine(), float64(ms.HeapAlloc) / (1 << 20)}
	}
	start := time.Now()
	var samples []sample
	for time.Since(start) < d {
		time.Sleep(10 * time.Second) // pacing: a sample every 10 s
		s := measure(time.Since(start).Round(time.Second))
		samples = append(samples, s)
		t.Logf("%v: %d goroutines, heap %.1f MiB", s.at, s.goroutines, s.heapMiB)
	}
	close(stop)
	wg.Wait()
	time.Sleep(2 * time.Second) // pacing: streams and reports settle
	end := measure(time.Since(start).Round(time.Second))
	t.Logf("after the load: %d goroutines, heap %.1f MiB; answers %v", end.goroutines, end.heapMiB, codes)

	if codes[0] > 0 || codes[200] == 0 {
		t.Errorf("answers %v: want 200s and 429s, no transport error", codes)
	}
	for code := range codes {
		if code >= 500 {
			t.Errorf("answers %v: a 5xx", codes)
		}
	}
	// The reference: the first sample after a minute (connections and
	// pools warm), or the first one in a shorter run.
	ref := samples[0]
	for _, s := range samples {
		if s.at >= time.Minute {
			ref = s
			break
		}
	}
	if end.goroutines > ref.goroutines+20 {
		t.Errorf("goroutines %d after the load, %d at %v: a leak", end.goroutines, ref.goroutines, ref.at)
	}
	if end.heapMiB > ref.heapMiB*1.5+8 {
		t.Errorf("live heap %.1f MiB after the load, %.1f MiB at %v: a leak", end.heapMiB, ref.heapMiB, ref.at)
	}
	for _, nd := range c.live() {
		for _, tn := range tenants {
			resp, err := c.hc.Get("http://" + nd.Addr() + "/tenants/" + tn.Name)
			if err != nil {
				t.Fatal(err)
			}
			var v struct {
				Owner    string `json:"owner"`
				InFlight struct {
					Used int `json:"used"`
				} `json:"in_flight"`
			}
			err = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("/tenants/%s on %s: %d %v", tn.Name, nd.Name(), resp.StatusCode, err)
			}
			if v.Owner == nd.Name() && v.InFlight.Used != 0 {
				t.Errorf("%s holds %d slots on its owner %s after the load", tn.Name, v.InFlight.Used, nd.Name())
			}
		}
	}
}
