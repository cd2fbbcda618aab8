package node

// A hop sent to an owner that has just died is not the client's 502: the
// edge's pooled keep-alive connections to the dead owner were closed under
// it, so a hop on one of them never reached the owner; the edge re-sends it
// on a fresh connection (refused: the owner is gone) and falls back to its
// strict share.
//
//	go test -race -count=1 -run TestDeadOwner ./node/

import (
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
)

// TestDeadOwnerNo502: load through every node with keep-alive connections
// (so each edge holds pooled connections to each owner), then a crash of one
// owner. Requests sent to the survivors after the crash get no 502 and no
// transport error; only what was in flight on the dead node itself may fail.
func TestDeadOwnerNo502(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of gossip or load: not in -short")
	}
	names := []string{"acme", "globex", "initech", "umbrella"}
	var tcs []config.Tenant
	for _, n := range names {
		tcs = append(tcs, clTenant(n, 100000)) // the limits do not matter here
	}
	lns := map[string]*killListener{}
	var lnsMu sync.Mutex
	c := startClusterWith(t, 3, 2*time.Second, clOptions{Listen: func(name string) (net.Listener, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		kl := &killListener{Listener: ln}
		lnsMu.Lock()
		lns[name] = kl
		lnsMu.Unlock()
		return kl, nil
	}}, tcs...)
	victim := c.byName(c.owner("acme"))
	var owned []string
	for _, n := range names {
		if c.owner(n) == victim.Name() {
			owned = append(owned, n)
		}
	}
	c.warm(names)

	// 4 tenants × one request every 4 ms, up to 16 in flight each: every
	// edge pools several connections to every owner.
	load := c.startLoad(names, c.live(), 4*time.Millisecond)
	time.Sleep(800 * time.Millisecond) // load runs meanwhile: pacing
	load.without(victim.Name())        // what a load balancer does once it sees the node gone
	killStart := time.Now()
	lnsMu.Lock()
	lns[victim.Name()].kill() // every socket at once, as the kernel does on kill -9
	lnsMu.Unlock()
	killAt := time.Now() // every socket of the victim is closed from here on
	if err := victim.Close(); err != nil {
		t.Logf("close %s: %v", victim.Name(), err)
	}
	victim.gone = true
	closed := time.Since(killAt)
	took := c.waitConverged(10 * time.Second)
	time.Sleep(300 * time.Millisecond) // load runs meanwhile, on the new ring
	res := load.finish()

	var before, after, bad502, badErr, other5xx, cut int
	for _, r := range res {
		if !r.at.After(killAt) || r.via == victim.Name() {
			before++
			if r.err != nil || r.rep.status == http.StatusBadGateway {
				cut++ // in flight on, or through, the node being killed
			}
			continue
		}
		after++
		switch {
		case r.err != nil:
			badErr++
			if badErr <= 3 {
				t.Errorf("%s via %s at %+.3fs after the kill: %v", r.tenant, r.via, r.at.Sub(killAt).Seconds(), r.err)
			}
		case r.rep.status == http.StatusBadGateway:
			bad502++
			if bad502 <= 5 {
				t.Errorf("%s via %s sent %+.3fs after the kill: %v", r.tenant, r.via, r.at.Sub(killAt).Seconds(), r.rep)
			}
		case r.rep.status >= 500:
			other5xx++
			if other5xx <= 3 {
				t.Logf("%s via %s sent %+.3fs after the kill: %v", r.tenant, r.via, r.at.Sub(killAt).Seconds(), r.rep)
			}
		}
	}
	t.Logf("killed %s (owner of %v; its sockets closed in %v, Close took %v), survivors converged %v after; sent %d before the kill (%d failed: in flight on the killed node), %d after: 502 %d, transport errors %d, other 5xx %d",
		victim.Name(), owned, killAt.Sub(killStart).Round(time.Microsecond), closed.Round(time.Millisecond), took.Round(time.Millisecond), before, cut, after, bad502, badErr, other5xx)
	for _, nd := range c.live() {
		for i, e := range nd.log.find(map[string]any{"msg": "forward"}) {
			if i < 5 {
				t.Logf("%s: %v", nd.Name(), e)
			}
		}
	}
	if bad502 > 0 || badErr > 0 {
		t.Errorf("%d answers 502 and %d transport errors for requests sent to the survivors after the kill, want 0", bad502, badErr)
	}
}

// killListener tracks the connections it accepted so that kill can close
// them all, and itself, at once: what the kernel does to a process's
// sockets on kill -9 (Node.Close alone lets requests in flight finish and
// closes idle connections one by one).
type killListener struct {
	net.Listener
	mu     sync.Mutex
	conns  []net.Conn
	killed bool
}

func (l *killListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.killed {
		c.Close()
		return nil, net.ErrClosed
	}
	l.conns = append(l.conns, c)
	return c, nil
}

func (l *killListener) kill() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.killed = true
	_ = l.Listener.Close()
	for _, c := range l.conns {
		_ = c.Close()
	}
}
