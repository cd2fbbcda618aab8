package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/handoff"
	"github.com/ringgate/ringgate/internal/redistest"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/ring"
	"github.com/ringgate/ringgate/router"
	"github.com/ringgate/ringgate/snapshot"
)

// BenchmarkHandoffTake measures a new owner's side of a handoff when the
// previous owner's final snapshots are already in Redis: from the ring
// change (tenants held) to every tenant released for its first decision.
func BenchmarkHandoffTake(b *testing.B) {
	for _, tenants := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("tenants=%d", tenants), func(b *testing.B) {
			rds := redistest.Start(b)
			cfg := benchConfig("taker", "127.0.0.1:1")
			cfg.Tenants = nil
			var names []string
			for i := range tenants {
				name := fmt.Sprintf("t%03d", i)
				names = append(names, name)
				cfg.Tenants = append(cfg.Tenants, config.Tenant{Name: name, Keys: []string{"sk-" + name}, RPM: 1000, TPM: 1 << 20})
			}
			cfg.Redis.Addr = rds.Addr()
			cfg.Redis.Timeout = 100 * time.Millisecond
			cfg.Redis.HandoffWait = time.Second
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			rt, err := router.New(router.Options{Config: cfg, Logger: log})
			if err != nil {
				b.Fatal(err)
			}
			store, err := snapshot.NewStore(snapshot.StoreConfig{Addrs: []string{rds.Addr()}, Timeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			h := handoff.New(handoff.Config{Self: "taker", Window: cfg.Limits.Window, StoreTimeout: cfg.Redis.Timeout, FinalWait: cfg.Redis.HandoffWait, Logger: log},
				rt.Moves(), rt.Moves(), store, nil)
			b.Cleanup(func() { _ = store.Close() })
			from := ring.New(1, []string{"giver"})
			to := ring.New(2, []string{"taker", "giver"})

			// A typical busy tenant: a request and a few hundred tokens in
			// every bucket of the window.
			src := limiter.NewTenant(limiter.Limits{Requests: 1 << 20, Tokens: 1 << 30}, cfg.Limits.Window, cfg.Limits.SlotTTL)
			now := time.Now().UnixNano()
			step := int64(cfg.Limits.Window) / limiter.Buckets
			for i := int64(0); i < limiter.Buckets; i++ {
				src.Admit(now-int64(cfg.Limits.Window)+i*step, 300)
			}
			st := src.Export(now)
			var saved time.Time
			save := func() {
				saved = time.Now()
				batch := make([]*snapshot.Snapshot, 0, len(names))
				for _, n := range names {
					batch = append(batch, &snapshot.Snapshot{Tenant: n, Writer: "giver", WrittenAt: time.Now().UnixNano(),
						RingHash: to.Hash(), Final: true, State: st})
				}
				if err := store.SaveBatch(context.Background(), batch, time.Minute); err != nil {
					b.Fatal(err)
				}
			}
			save()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// A final snapshot is taken only while fresh: a long run
				// writes them again, off the clock.
				if time.Since(saved) > 100*time.Millisecond {
					b.StopTimer()
					save()
					b.StartTimer()
				}
				for _, n := range names {
					rt.Moves().Hold(n, time.Second)
				}
				a := h.Take(names, from, to)
				if a.Final != len(names) {
					b.Fatalf("took %+v, want %d final snapshots", a, len(names))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(len(names)), "µs/tenant")
		})
	}
}
