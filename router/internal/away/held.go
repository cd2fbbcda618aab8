package away

import (
	"sync"
	"time"

	"github.com/ringgate/ringgate/limiter"
)

// Held are deltas for tenants this node has not taken over yet: it does not
// own them by its ring (the sender saw the ring change first), or it holds
// them while it loads their state. Applied then, they would be lost: the
// state loaded replaces what the windows held, and a release (-1 slot)
// that arrives before the charge it releases cannot be applied. Release
// applies them; ones older than a window are dropped.
type Held struct {
	mu sync.Mutex
	by map[string][]Kept
}

// Kept is a delta held.
type Kept struct {
	From  string // the node whose calls they are ("": this one)
	At    int64  // when it arrived (router clock)
	Delta limiter.Delta
}

// HeldFor is how long deltas wait at a node that does not count their
// tenant (its ring is behind the sender's) before they are passed on to
// the node that does: longer than rings take to agree and a take to end.
const HeldFor = 2 * time.Second

// Hold keeps ds, deltas of calls on node from ("": this one) that reached
// this node at now for the tenant name, unless counts (called under the
// lock Release and Due take) says they are this node's to apply now, and
// reports whether it kept them. Deltas held over window and HeldFor, for
// any tenant, are forgotten: their tenants were never taken over.
func (h *Held) Hold(name string, now int64, window time.Duration, from string, ds []limiter.Delta, counts func() bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if counts() {
		return false
	}
	if h.by == nil {
		h.by = make(map[string][]Kept)
	}
	keep := int64(window) + int64(HeldFor) // Due passes them on before
	for other, hs := range h.by {          // forget deltas for tenants never taken over
		i := 0
		for i < len(hs) && now-hs[i].At >= keep {
			i++
		}
		if i == len(hs) {
			delete(h.by, other)
		} else if i > 0 {
			h.by[other] = hs[i:]
		}
	}
	for _, d := range ds {
		h.by[name] = append(h.by[name], Kept{From: from, At: now, Delta: d})
	}
	return true
}

// Release forgets the deltas held for name and gives them to release,
// which runs under the lock Hold decides under: what Hold lets through
// once release has run comes after them.
func (h *Held) Release(name string, release func([]Kept)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ks := h.by[name]
	delete(h.by, name)
	release(ks)
}

// Due takes the deltas that have waited HeldFor at this node for tenants
// it did not take over, by tenant. state says whether a tenant is gone
// (its deltas are dropped) or being taken over here (they wait).
func (h *Held) Due(now int64, state func(name string) (gone, taking bool)) map[string][]Kept {
	out := map[string][]Kept{}
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, hs := range h.by {
		gone, taking := state(name)
		if gone {
			delete(h.by, name)
			continue
		}
		if len(hs) == 0 || now-hs[0].At < int64(HeldFor) || taking {
			continue
		}
		delete(h.by, name)
		out[name] = hs
	}
	return out
}
