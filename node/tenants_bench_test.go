package node

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/internal/procstat"
)

// BenchmarkManyTenants starts a standalone node configured with 100 000
// tenants (all three limits each), drives 10 000 of them with one request
// each, and reports the time to ready, the heap and the process's resident
// memory (VmRSS; the test binary and the fake provider included) before
// start, once ready, and after the load.
func BenchmarkManyTenants(b *testing.B) {
	const configured, driven = 100_000, 10_000
	for b.Loop() {
		_, upAddr := startBenchFake(b)
		cfg := benchConfig("many", upAddr)
		cfg.Tenants = make([]config.Tenant, configured)
		for i := range cfg.Tenants {
			name := fmt.Sprintf("t%06d", i)
			cfg.Tenants[i] = config.Tenant{Name: name, Keys: []string{"sk-" + name}, RPM: 600, TPM: 100000, Concurrency: 10,
				Priority: config.PriorityInteractive}
		}
		runtime.GC()
		rss0, heap0 := rssBytes(b), heapBytes()
		start := time.Now()
		n, err := Start(cfg, benchOptions())
		if err != nil {
			b.Fatal(err)
		}
		ready := time.Since(start)
		runtime.GC()
		rss1, heap1 := rssBytes(b), heapBytes()
		c := benchClient(n.Addr())
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		deadline := time.Now().Add(2 * time.Minute)
		for i := range driven {
			req.Reset()
			req.SetRequestURI("http://" + n.Addr() + "/v1/chat/completions")
			req.Header.SetMethod(fasthttp.MethodPost)
			req.Header.Set("Authorization", fmt.Sprintf("Bearer sk-t%06d", i*(configured/driven)))
			req.SetBodyString(benchBody)
			if err := c.DoTimeout(req, resp, benchReqTimeout); err != nil || resp.StatusCode() != fasthttp.StatusOK {
				b.Fatalf("request %d: %v %d %.200s", i, err, resp.StatusCode(), resp.Body())
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d requests took over 2 minutes", i)
			}
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
		runtime.GC()
		rss2, heap2 := rssBytes(b), heapBytes()
		_ = n.Close()
		b.ReportMetric(ready.Seconds()*1000, "ready-ms")
		b.ReportMetric(float64(heap1-heap0)/(1<<20), "heap-ready-MiB")
		b.ReportMetric(float64(heap2-heap0)/(1<<20), "heap-driven-MiB")
		b.ReportMetric(float64(rss1-rss0)/(1<<20), "rss-ready-MiB")
		b.ReportMetric(float64(rss2)/(1<<20), "rss-driven-MiB")
	}
}

func heapBytes() int64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// rssBytes is the process's VmRSS.
func rssBytes(tb testing.TB) int64 {
	rss, err := procstat.Resident(0)
	if err != nil {
		tb.Skip(err)
	}
	return rss
}
