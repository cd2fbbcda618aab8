package hop

import (
	"time"

	"github.com/ringgate/ringgate/config"
)

// Timeouts are a hop's budgets from the config: connect is
// forward_connect_timeout (15 ms when unset); first and idle are its read
// budgets, forward_timeout if set, else the longest wait in a tenant's
// queue and upstream budgets plus a margin, so the owner, not the edge,
// decides when a request waited or an upstream took too long. It reads
// the config's queue waits, which is all it knows of tenants.
func Timeouts(cfg *config.Config) (connect, first, idle time.Duration) {
	connect = cfg.Cluster.ForwardConnectTimeout
	if connect <= 0 {
		connect = 15 * time.Millisecond
	}
	if t := cfg.Cluster.ForwardTimeout; t > 0 {
		return connect, t, t
	}
	for _, u := range cfg.Upstreams {
		first = max(first, u.Timeout)
		idle = max(idle, u.StreamIdleTimeout, u.Timeout)
	}
	if first <= 0 {
		first = 10 * time.Minute
	}
	if idle <= 0 {
		idle = first
	}
	wait := max(cfg.Queue.InteractiveWait, cfg.Queue.BatchWait)
	for i := range cfg.Tenants {
		wait = max(wait, cfg.Tenants[i].InteractiveWait, cfg.Tenants[i].BatchWait)
	}
	return connect, first + wait + 5*time.Second, idle + 5*time.Second
}
