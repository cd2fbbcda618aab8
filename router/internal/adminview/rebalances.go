package adminview

import (
	"sync"
	"time"

	"github.com/ringgate/ringgate/router/internal/status"
)

// KeptRebalances bounds the rebalances a node keeps for its status page.
const KeptRebalances = 20

// Rebalances are the last ring changes a node logged, for the status
// page: at most KeptRebalances, the oldest forgotten first. The zero
// value is empty and ready.
type Rebalances struct {
	mu   sync.Mutex
	list []status.Rebalance // oldest first
}

// Note keeps ev, stamped at now (Unix ns: the node's clock).
func (r *Rebalances) Note(ev status.Rebalance, now int64) {
	ev.At = time.Unix(0, now).UTC()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, ev)
	if n := len(r.list); n > KeptRebalances {
		r.list = append([]status.Rebalance(nil), r.list[n-KeptRebalances:]...)
	}
}

// List is a copy of the kept rebalances, oldest first.
func (r *Rebalances) List() []status.Rebalance {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]status.Rebalance(nil), r.list...)
}
