// Package deltaid names the deltas (a call's admission or release on a
// node that is not its tenant's owner) a node sends, and skips a delta
// that reaches a node a second time. It owns the IDs and the memory of
// those applied; it knows nothing of how deltas travel or what they
// charge.
package deltaid

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/ringgate/ringgate/limiter"
)

// Deltas travel at least once: a report whose answer was lost (the owner
// applied it, then the answer timed out) is sent again with the next one.
// So every delta gets an ID from the node whose call it describes, unique
// to that node (a random base, counted up: a restarted node does not reuse
// its old IDs), and the node that applies deltas remembers, per origin, the
// IDs it applied within the last two windows and skips one it is given
// again. Deltas passed on (a tenant handed over again) keep their IDs.
//
// What this does not cover: a delta applied by an owner that then hands
// the tenant over (its windows carry the charge) and sent again to the new
// owner, which never saw its ID. That needs a lost answer and a ring change
// within the same report's retry, and costs one call's charge once.

// IDs names this node's deltas and remembers the ones applied here.
type IDs struct {
	next atomic.Uint64
	mu   sync.Mutex
	seen map[string]*seen // by origin node
}

type seen struct {
	at     map[uint64]int64 // ID → when applied (router clock)
	pruned int64            // when old IDs were last dropped
}

// pruneEvery: IDs remembered from one origin before the old ones are looked
// for (a scan), so a steady flow of deltas costs O(1) per delta.
const pruneEvery = 1024

// New makes the IDs of a process: its first comes from a random base.
func New() *IDs {
	var b [8]byte
	_, _ = rand.Read(b[:])
	ids := &IDs{seen: make(map[string]*seen)}
	// The top bit left clear: 2^63 IDs before a wrap.
	ids.next.Store(binary.LittleEndian.Uint64(b[:]) >> 1)
	return ids
}

// Name gives d this node's next ID.
func (ids *IDs) Name(d limiter.Delta) limiter.Delta {
	d.ID = ids.next.Add(1)
	return d
}

// Fresh returns the deltas of ds that were not applied here before, from the
// same origin, and remembers them as applied; keep is how long an ID is
// remembered (two windows). Unnamed deltas always pass. ds is reused.
func (ids *IDs) Fresh(origin string, now, keep int64, ds []limiter.Delta) []limiter.Delta {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	s := ids.seen[origin]
	if s == nil {
		s = &seen{at: make(map[uint64]int64), pruned: now}
		ids.seen[origin] = s
	}
	out := ds[:0]
	for _, d := range ds {
		if d.ID != 0 {
			if _, dup := s.at[d.ID]; dup {
				continue
			}
			s.at[d.ID] = now
		}
		out = append(out, d)
	}
	if len(s.at) >= pruneEvery && now-s.pruned >= keep/2 {
		for id, at := range s.at {
			if now-at >= keep {
				delete(s.at, id)
			}
		}
		s.pruned = now
	}
	return out
}
