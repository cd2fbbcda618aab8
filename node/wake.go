package node

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringgate/ringgate/gossip"
)

// A node that wakes up does not trust stale ownership.
//
// Stopped (SIGSTOP, a VM pause, a stall) for longer than failure detection,
// a node may have been declared dead, and its tenants taken over by others,
// while its own view stood still: when it runs again its ring still makes
// it the owner of its tenants, their limiters lack what the new owners
// admitted, and nothing in its membership changes to tell it (its peers
// refute nothing: the wake-up is silent on its side). It must catch up
// before it admits again.
//
// Detection: a watchdog goroutine ticks every wakeTick and measures the gap
// between ticks (monotonic clock, and the wall clock for a suspended host,
// whose monotonic clock stops). A gap over the pause limit — the shortest
// time after which peers may declare a member dead (gossip.Timing.DeadAfter,
// 1.6 s with LANFast) — means the node stood still long enough to have been
// declared dead. Each tick is also the router's heartbeat: a request the
// server reads right after the wake-up, before the watchdog has run,
// finds the heartbeat older than the limit and is refused as well
// (router/internal/wake).
//
// Catching up, in order, the router refusing to decide meanwhile (a client
// request gets 503 not_ready with Retry-After: 1, a hop is refused with
// x-ringgate-hop-refused: not_ready so that its edge answers 503 too) and
// /readyz answering 503:
//
//  1. Step out of the ring: the node rebuilds its ring without itself, the
//     ring its peers built when they declared it dead. The handoff protocol
//     hands its tenants over in its own books (frozen, moved to their owners
//     in that ring).
//  2. Gossip re-converges: push/pull with every other member
//     (gossip.Node.Resync) until each one that answers lists this node
//     alive with its current metadata; a peer that held it dead or suspect
//     makes memberlist refute in the exchange, and a later round confirms
//     the refutation took (at most catchUpMax).
//  3. Back on the ring: the ring is rebuilt from the member list with this
//     node in it, and the handoff protocol's Change takes the tenants back
//     from whoever holds them now (peer to peer: a tenant another node took
//     over meanwhile arrives with what that node admitted; one nobody took
//     comes back to this node's own state). Only then does it decide again.
//
// The round trip through a ring without itself is what makes a node whose
// ring never changed take its tenants over again with their state; without
// it, its peers would hand the tenants back to it and it would never ask.

// wakeTick is the watchdog's period.
const wakeTick = 100 * time.Millisecond

// catchUpMax bounds step 2: past it the node goes back on the ring with
// whatever gossip says then (a peer that never answers must not keep it out
// for ever).
const catchUpMax = 10 * time.Second

// waker is the node's pause watchdog and catch-up state.
type waker struct {
	limit    time.Duration // a gap longer than this is a pause
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
	running  atomic.Bool // a catch-up goroutine runs
	catching atomic.Bool // steps 1-3 are under way: not ready

	mu   sync.Mutex // orders ring updates: onMembers and the catch-up
	away bool       // steps 1-2: the ring is built without this node
}

// startWatchdog arms the router's heartbeat check and starts the watchdog
// (cluster nodes only).
func (n *Node) startWatchdog(t gossip.Timing) {
	n.wake.limit = t.DeadAfter()
	n.wake.stop = make(chan struct{})
	n.wake.done = make(chan struct{})
	n.router.SetPauseLimit(n.wake.limit)
	go n.watchdog()
}

// stopWatchdog stops the watchdog and waits for a catch-up in progress to
// notice.
func (n *Node) stopWatchdog() {
	if n.wake.stop == nil {
		return
	}
	n.wake.once.Do(func() { close(n.wake.stop) })
	<-n.wake.done
}

func (n *Node) watchdog() {
	defer close(n.wake.done)
	tick := time.NewTicker(wakeTick)
	defer tick.Stop()
	last := time.Now()
	var catchUp sync.WaitGroup
	defer catchUp.Wait()
	for {
		select {
		case <-n.wake.stop:
			return
		case <-tick.C:
		}
		now := time.Now()
		gap := max(now.Sub(last), now.Round(0).Sub(last.Round(0)))
		last = now
		if gap > n.wake.limit {
			// Before the heartbeat: no request may see a fresh
			// heartbeat and no catch-up.
			n.router.SetCatchingUp(true)
			if n.wake.running.CompareAndSwap(false, true) {
				catchUp.Add(1)
				go func() {
					defer catchUp.Done()
					defer n.wake.running.Store(false)
					n.catchUp(gap)
				}()
			}
		}
		n.router.Heartbeat()
		n.router.Moves().SweepHeld() // the watchdog's tick is the node's clock tick
	}
}

// catchUp runs steps 1-3 after a pause of gap.
func (n *Node) catchUp(gap time.Duration) {
	start := time.Now()
	n.wake.catching.Store(true)
	n.router.SetCatchingUp(true)
	n.router.SetReady(false)
	n.mu.Lock()
	g := n.gossip
	n.mu.Unlock()
	n.log.Warn("wake", "phase", "paused", "gap_ms", gap.Milliseconds(), "limit_ms", n.wake.limit.Milliseconds(),
		"detail", "stood still long enough to have been declared dead: catching up before deciding again")
	if g == nil {
		n.wake.catching.Store(false)
		n.router.SetCatchingUp(false)
		n.publish()
		return
	}

	// 1. Out of the ring.
	n.setAway(true)
	n.table.Flush()

	// 2. Gossip re-converges.
	rounds, confirmed := 0, false
	for !confirmed {
		rounds++
		contacted, ok, err := g.Resync()
		confirmed = ok
		if errors.Is(err, gossip.ErrStopped) {
			return
		}
		if confirmed {
			break
		}
		if time.Since(start) > catchUpMax {
			n.log.Warn("wake", "phase", "unconfirmed", "rounds", rounds, "contacted", contacted, "error", errText(err),
				"detail", "gossip did not confirm this node alive in time; back on the ring as gossip sees it now")
			break
		}
		select {
		case <-n.wake.stop:
			return
		case <-time.After(wakeTick):
		}
	}

	// 3. Back on the ring, tenants taken back with their state.
	n.setAway(false)
	n.table.Flush()
	n.wake.catching.Store(false)
	n.router.SetCatchingUp(false)
	n.publish()
	r := n.currentRing()
	n.log.Info("wake", "phase", "caught_up", "took_ms", time.Since(start).Milliseconds(), "resync_rounds", rounds,
		"confirmed", confirmed, "ring_version", r.Version())
}

// setAway switches the ring between with and without this node and feeds
// the table the current members accordingly.
func (n *Node) setAway(away bool) {
	n.wake.mu.Lock()
	defer n.wake.mu.Unlock()
	n.wake.away = away
	n.mu.Lock()
	ms := n.members
	n.mu.Unlock()
	n.table.Update(n.activeLocked(ms))
}

// activeLocked are the members a ring is built of: the active ones, without
// this node while it is away. wake.mu must be held.
func (n *Node) activeLocked(ms []gossip.Member) []string {
	var active []string
	for _, m := range ms {
		if m.State == gossip.StateActive && (!n.wake.away || m.Name != n.cfg.Node.Name) {
			active = append(active, m.Name)
		}
	}
	if n.wake.away && len(active) == 0 {
		// Alone: nobody can have taken anything over; keep the ring.
		n.wake.away = false
		return n.activeLocked(ms)
	}
	return active
}

// catchingUp reports whether a catch-up is under way (publish keeps the
// node unready meanwhile).
func (n *Node) catchingUp() bool {
	return n.wake.catching.Load()
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
