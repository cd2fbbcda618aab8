package node

import (
	"sync"

	"github.com/ringgate/ringgate/gossip"
	"github.com/ringgate/ringgate/ring"
)

// A team's tenants are placed on the ring by their team (ring.Pins), and
// the pins come from each node's config. Two nodes that place a tenant
// differently both think they own it, or neither does: during a rolling
// reload that moves a tenant to a team, that would last for the whole
// rollout. So a node keeps the pins it uses until every active member's
// config asks for the same ones (each gossips the hash of its config's
// pins), then switches: a ring of the same members with the new pins,
// handed over like any ring change, on every node within a gossip round.
// Until then a level of limits whose owner is not the tenant's is decided
// on this node's strict share of it (router/internal/levels).
//
// A node that starts while the others still run an older config uses its
// own pins from the start: the tenants whose team differs between the two
// configs are placed differently on it until the others catch up.

type pinsAgreement struct {
	mu                sync.Mutex
	want, use         ring.Pins // the config's; the table's
	wantHash, useHash uint64    // their hashes (Hash sorts every pinned name)
	disagree          bool      // logged: members ask for other pins
}

// setWant makes p the config's pins; n.pins.mu is held.
func (a *pinsAgreement) setWant(p ring.Pins) {
	a.want, a.wantHash = p, p.Hash()
}

// agreePins switches the table to the config's pins once every active
// member asks for them.
func (n *Node) agreePins(ms []gossip.Member) {
	if n.table == nil {
		return
	}
	n.pins.mu.Lock()
	defer n.pins.mu.Unlock()
	want := n.pins.wantHash
	var others []string
	for _, m := range ms {
		if m.State == gossip.StateActive && m.Name != n.cfg.Node.Name && m.Pins != want {
			others = append(others, m.Name)
		}
	}
	switch {
	case len(others) > 0:
		if !n.pins.disagree && n.pins.useHash != want {
			n.log.Warn("pins", "phase", "waiting", "members", others,
				"detail", "members' configs place teams' tenants otherwise; the placement in use stays until they agree")
		}
		n.pins.disagree = true
	case n.pins.useHash != want:
		n.pins.use, n.pins.useHash = n.pins.want, want
		n.pins.disagree = false
		n.log.Info("pins", "phase", "agreed", "members", len(ms))
		n.table.SetPins(n.pins.use)
	default:
		n.pins.disagree = false
	}
}
