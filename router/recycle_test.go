package router_test

// Calls go back to a pool when they end (recycle, proxy.go): many requests
// on keep-alive connections, some clients hanging up before, around or
// after the upstream's answer, JSON and streams, a team level and two
// provider budgets. Under -race, a recycled call read or written by a
// goroutine still holding it (a watch's fire, a stream writer) is a
// reported race; a call recycled while still holding a slot shows as a
// slot never freed.

import (
	"bufio"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
)

func TestRecycledCallsWithHangups(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of load")
	}
	tc := tenantCfg("pool", 1_000_000, 1_000_000_000, 1000)
	tc.Team = "crew"
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tc},
		teams:   []config.Team{{Name: "crew", RPM: 1_000_000, TPM: 1_000_000_000, Concurrency: 1000}},
		fake:    fakeupstream.Options{Latency: 30 * time.Millisecond, CompletionMin: 5, CompletionMax: 40},
		openAI: func(u *config.Upstream) {
			u.Concurrency = 500
			u.TPM = 1_000_000_000
			u.ModelLimits = []config.ModelLimit{{Model: openAIModel, Concurrency: 400, TPM: 1_000_000_000}}
		},
	})
	const clients, perClient = 6, 40
	var wg sync.WaitGroup
	for g := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			var conn net.Conn
			var br *bufio.Reader
			for range perClient {
				if conn == nil {
					c, err := net.DialTimeout("tcp", e.node.Addr(), clientTimeout)
					if err != nil {
						t.Error(err)
						return
					}
					conn, br = c, bufio.NewReader(c)
				}
				stream := rng.IntN(3) == 0
				body := chatBody(openAIModel, 30, stream, stream)
				if _, err := io.WriteString(conn, rawHead(e.node.Addr(), "/v1/chat/completions", keyOf("pool"), len(body))+string(body)); err != nil {
					conn.Close()
					conn = nil
					continue
				}
				if rng.IntN(5) < 2 {
					// Hang up before, around or just after the answer.
					time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond)
					conn.Close()
					conn = nil
					continue
				}
				_ = conn.SetReadDeadline(time.Now().Add(clientTimeout))
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Errorf("read answer: %v", err)
					conn.Close()
					conn = nil
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("status %d", resp.StatusCode)
				}
				if resp.Close {
					conn.Close()
					conn = nil
				}
			}
			if conn != nil {
				conn.Close()
			}
		}()
	}
	wg.Wait()
	e.waitTenant("pool", "nothing in flight", func(v tenantView) bool { return v.InFlight.Used == 0 })
	var up, model int64
	if !poll(settleWait, func() bool { up, model = e.slotsBoth(); return up == 0 && model == 0 }) {
		t.Fatalf("provider slots still held: %d (upstream), %d (model)", up, model)
	}
	if !poll(settleWait, func() bool {
		return plainMetric(string(e.get("/metrics", "").body), "ringgate_inflight_requests") == 0
	}) {
		t.Fatal("ringgate_inflight_requests never back to 0")
	}
	m := e.hangupMetrics("pool")
	t.Logf("client_gone %v, settled %v, upstream 2xx %v", m.gone, m.settled, m.upstream2xx)
}
