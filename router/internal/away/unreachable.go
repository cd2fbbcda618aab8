package away

import (
	"slices"
	"sync"
	"time"
)

// An edge that cannot reach a tenant's owner admits on its fallback share
// (limit / live members), and its reports of those admissions cannot reach
// the owner either. A dead owner is soon out of the ring; one that is alive
// (an asymmetric partition: a firewall between the HTTP ports, a wrong
// advertised address) goes on admitting its own clients up to the whole
// limit. So the edge says, in its gossip metadata, which owners it admits
// shares for, and an owner that k live members name keeps its own
// admissions to what their k shares (limit / live, rounded down) leave of
// each limit: together they stay within it. An owner stays named while the
// edge fell back on it within the last second, or holds reports for it not
// yet delivered (what the share admitted must be counted somewhere: by the
// owner's cut until the owner has it), a window at most, and not once it
// left the view (the reports go to the tenants' new owners). A blip of an
// owner slow to accept so costs it its part for a second or two, not a
// window.

// Unreachables tracks the owners this node fell back on lately.
type Unreachables struct {
	mu   sync.Mutex
	last map[string]int64 // owner → when this node last fell back on it (ns)
	// ledgers of the tenants that fell back on each owner, until their
	// reports were delivered.
	ledgers map[string]map[*Ledger]struct{}
	told    []string // what the hook was last given
	// tellMu orders the loops' reads of last and calls of the hook: a
	// loop ending and the next one starting never publish out of order.
	tellMu  sync.Mutex
	running bool // the loop is on
	kick    chan struct{}
	hook    func([]string)
}

// Node is what the loop reads of the node at each tick.
type Node interface {
	Now() int64            // the node's clock (ns)
	Window() time.Duration // the window in force
	Left(owner string) bool
}

// UnreachableTick is how often the loop looks for owners to stop naming;
// NamedFor how long an owner stays named after the last fallback on it
// with nothing left to report.
const (
	UnreachableTick = 250 * time.Millisecond
	NamedFor        = time.Second
)

// SetHook gives the node's way to say which owners it cannot reach (gossip
// metadata); called one call at a time, with the sorted names, whenever
// they change.
func (u *Unreachables) SetHook(f func(owners []string)) {
	u.mu.Lock()
	u.hook = f
	u.mu.Unlock()
}

// Note records that this node fell back on owner now, for the tenant whose
// ledger is l; the loop that names the owners reads n.
func (u *Unreachables) Note(owner string, l *Ledger, n Node) {
	now := n.Now()
	u.mu.Lock()
	if u.last == nil {
		u.last = make(map[string]int64)
		u.ledgers = make(map[string]map[*Ledger]struct{})
		u.kick = make(chan struct{}, 1)
	}
	_, had := u.last[owner]
	u.last[owner] = now
	if u.ledgers[owner] == nil {
		u.ledgers[owner] = make(map[*Ledger]struct{})
	}
	u.ledgers[owner][l] = struct{}{}
	start := !u.running
	u.running = true
	u.mu.Unlock()
	if start {
		go u.loop(n)
	} else if !had {
		select { // a new owner is named at once
		case u.kick <- struct{}{}:
		default:
		}
	}
}

// loop tells the hook which owners to name, as they change, until none is
// left.
func (u *Unreachables) loop(n Node) {
	t := time.NewTicker(UnreachableTick)
	defer t.Stop()
	for {
		window := int64(n.Window())
		now := n.Now()
		u.tellMu.Lock()
		u.mu.Lock()
		names := u.named(now, window, n)
		changed := !slices.Equal(names, u.told)
		hook := u.hook
		if changed {
			u.told = names
		}
		if len(names) == 0 {
			u.running = false
		}
		u.mu.Unlock()
		if changed && hook != nil {
			hook(names)
		}
		u.tellMu.Unlock()
		if len(names) == 0 {
			return
		}
		select {
		case <-t.C:
		case <-u.kick:
		}
	}
}

// named forgets the owners no longer to be named at now and returns the
// others, sorted; u.mu is held.
func (u *Unreachables) named(now, window int64, n Node) []string {
	names := make([]string, 0, len(u.last))
	for owner, at := range u.last {
		keep := now-at <= int64(NamedFor)
		for l := range u.ledgers[owner] {
			if !l.Delivered() {
				keep = true
			} else {
				delete(u.ledgers[owner], l)
			}
		}
		if !keep || now-at > window || n.Left(owner) {
			delete(u.last, owner)
			delete(u.ledgers, owner)
			continue
		}
		names = append(names, owner)
	}
	slices.Sort(names)
	return names
}
