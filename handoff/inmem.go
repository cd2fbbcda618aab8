package handoff

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ringgate/ringgate/snapshot"
)

// NoStore is the store of a cluster without Redis: it keeps nothing and
// finds nothing. Planned changes still hand state over peer to peer.
type NoStore struct{}

func (NoStore) SaveBatch(context.Context, []*snapshot.Snapshot, time.Duration) error { return nil }

func (NoStore) LoadMany(_ context.Context, names []string) ([]*snapshot.Snapshot, error) {
	return make([]*snapshot.Snapshot, len(names)), nil
}

// ErrDown is what the in-memory twins answer while switched off.
var ErrDown = errors.New("handoff: down (in-memory twin switched off)")

// InmemStore is a Store in memory, for tests; Down makes it fail like a
// Redis that is unreachable.
type InmemStore struct {
	mu    sync.Mutex
	snaps map[string]snapshot.Snapshot
	down  bool
}

// NewInmemStore returns an empty store.
func NewInmemStore() *InmemStore { return &InmemStore{snaps: make(map[string]snapshot.Snapshot)} }

// Down switches the store off (true) or on.
func (s *InmemStore) Down(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

func (s *InmemStore) SaveBatch(_ context.Context, snaps []*snapshot.Snapshot, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return ErrDown
	}
	for _, sn := range snaps {
		s.snaps[sn.Tenant] = *sn
	}
	return nil
}

func (s *InmemStore) LoadMany(_ context.Context, names []string) ([]*snapshot.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return nil, ErrDown
	}
	out := make([]*snapshot.Snapshot, len(names))
	for i, n := range names {
		if sn, ok := s.snaps[n]; ok {
			out[i] = &sn
		}
	}
	return out, nil
}

// InmemPeers connects Movers in one process, for tests: Fetch calls the
// named node's HandOver directly, through the wire format. Partition cuts
// a node off (it neither asks nor answers).
type InmemPeers struct {
	self string
	net  *InmemNet
}

// InmemNet is the set of Movers InmemPeers reach.
type InmemNet struct {
	mu    sync.Mutex
	nodes map[string]*Mover
	cut   map[string]bool
}

// NewInmemNet returns an empty network.
func NewInmemNet() *InmemNet {
	return &InmemNet{nodes: make(map[string]*Mover), cut: make(map[string]bool)}
}

// Peers returns the Peers node self uses on this network.
func (n *InmemNet) Peers(self string) *InmemPeers { return &InmemPeers{self: self, net: n} }

// Join puts a node's Mover on the network.
func (n *InmemNet) Join(name string, m *Mover) {
	n.mu.Lock()
	n.nodes[name] = m
	n.mu.Unlock()
}

// Partition cuts the named node off (true) or reconnects it.
func (n *InmemNet) Partition(name string, cut bool) {
	n.mu.Lock()
	n.cut[name] = cut
	n.mu.Unlock()
}

// Others are the other nodes on the network.
func (p *InmemPeers) Others() []string {
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	var out []string
	for n := range p.net.nodes {
		if n != p.self {
			out = append(out, n)
		}
	}
	return out
}

func (p *InmemPeers) Fetch(ctx context.Context, node string, tenants []string) ([]Reply, error) {
	p.net.mu.Lock()
	m, cut := p.net.nodes[node], p.net.cut[node] || p.net.cut[p.self]
	p.net.mu.Unlock()
	if m == nil || cut {
		return nil, ErrDown
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return DecodeReplies(EncodeReplies(nil, node, m.cfg.Clock(), m.HandOver(p.self, tenants)))
}
