package tenant

import (
	"time"

	"github.com/jonboulle/clockwork"
)

// Gate holds a tenant's requests during a handoff.
type Gate struct {
	open chan struct{}
	wait time.Duration
	clk  clockwork.Clock // the node's: the wait's budget
}

// NewGate is a closed gate whose wait is bounded by wait on clk.
func NewGate(wait time.Duration, clk clockwork.Clock) *Gate {
	return &Gate{open: make(chan struct{}), wait: wait, clk: clk}
}

// Release opens the gate (once: a second Release does nothing).
func (g *Gate) Release() {
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// AwaitHandoff waits while the tenant's state is being loaded, bounded so a
// stuck handoff cannot hang a request.
// It reports false when the wait ran out: the windows are not the
// tenant's yet, and admitting on them would be admitting blind (and an
// import that lands later would wipe the charge).
func (t *Tenant) AwaitHandoff() bool {
	g := t.Gate.Load()
	if g == nil {
		return true
	}
	timer := g.clk.NewTimer(g.wait)
	defer timer.Stop()
	select {
	case <-g.open:
		return true
	case <-timer.Chan():
		return false
	}
}
