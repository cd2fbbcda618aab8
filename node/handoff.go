package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/handoff"
	"github.com/ringgate/ringgate/snapshot"
)

// moverConfig is the handoff protocol's configuration from the node's.
func moverConfig(cfg *config.Config, clock func() int64, o Options) handoff.Config {
	return handoff.Config{
		Self:             cfg.Node.Name,
		Window:           cfg.Limits.Window,
		SnapshotInterval: cfg.Redis.SnapshotInterval,
		StoreTimeout:     cfg.Redis.Timeout,
		FinalWait:        cfg.Redis.HandoffWait,
		FetchTimeout:     cfg.Cluster.HandoffFetchTimeout,
		Clock:            clock,
		Logger:           o.Logger.With("node", cfg.Node.Name),
	}
}

// storeCollectors expose the snapshot store's counters as Prometheus
// counters.
func storeCollectors(store *snapshot.Store) []prometheus.Collector {
	stat := func(name, help string, v func(snapshot.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ringgate_snapshot_" + name, Help: help},
			func() float64 { return float64(v(store.Stats())) })
	}
	return []prometheus.Collector{
		stat("saved_total", "Tenant snapshots written to Redis.", func(s snapshot.Stats) uint64 { return s.Saved }),
		stat("save_failures_total", "Snapshot batches that failed or timed out.", func(s snapshot.Stats) uint64 { return s.SaveFailures }),
		stat("skipped_total", "Redis calls skipped while Redis was failing.", func(s snapshot.Stats) uint64 { return s.Skipped }),
		stat("loaded_total", "Tenant snapshots read from Redis.", func(s snapshot.Stats) uint64 { return s.Loaded }),
		stat("load_failures_total", "Snapshot loads that failed or timed out.", func(s snapshot.Stats) uint64 { return s.LoadFailures }),
		stat("decode_errors_total", "Values under a snapshot key that did not decode.", func(s snapshot.Stats) uint64 { return s.DecodeErrors }),
	}
}
