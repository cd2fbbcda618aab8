package hop

import (
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/ringgate/ringgate/keepalive"
)

// Inmem is an in-memory network for tests: nodes listen on names, pools
// dial them through Dialer, and Partition cuts sets of nodes from each
// other until Heal. A cut refuses new connections across it, as a dead
// peer's port does. A connection open across it fails: a request not yet
// written on it is stale (keepalive.ErrStale: the peer never saw it), a
// read reset.
type Inmem struct {
	mu        sync.Mutex
	listeners map[string]*fasthttputil.InmemoryListener
	cut       map[[2]string]bool
	conns     map[[2]string][]*inmemConn // open, by link: failed by a cut
}

// NewInmem makes an empty network.
func NewInmem() *Inmem {
	return &Inmem{listeners: make(map[string]*fasthttputil.InmemoryListener), cut: make(map[[2]string]bool),
		conns: make(map[[2]string][]*inmemConn)}
}

// Listen makes addr's listener: serve it, and close it to take addr off
// the network.
func (n *Inmem) Listen(addr string) net.Listener {
	ln := fasthttputil.NewInmemoryListener()
	n.mu.Lock()
	n.listeners[addr] = ln
	n.mu.Unlock()
	return ln
}

// Dialer is how the node named from dials its peers.
func (n *Inmem) Dialer(from string) Dialer {
	return func(addr string, _ time.Duration) (net.Conn, error) {
		n.mu.Lock()
		ln, cut := n.listeners[addr], n.cut[[2]string{from, addr}]
		n.mu.Unlock()
		if ln == nil || cut {
			return nil, &net.OpError{Op: "dial", Net: "inmem", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		}
		raw, err := ln.Dial()
		if err != nil {
			return nil, err
		}
		c := &inmemConn{Conn: raw}
		n.mu.Lock()
		link := [2]string{from, addr}
		n.conns[link] = append(n.conns[link], c)
		n.mu.Unlock()
		return c, nil
	}
}

// Partition cuts every node of a from every node of b, both ways.
func (n *Inmem) Partition(a, b []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, x := range a {
		for _, y := range b {
			for _, link := range [][2]string{{x, y}, {y, x}} {
				n.cut[link] = true
				for _, c := range n.conns[link] {
					c.cut.Store(true)
					_ = c.Conn.Close()
				}
				delete(n.conns, link)
			}
		}
	}
}

// Heal joins every link a Partition cut.
func (n *Inmem) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
}

// inmemConn is a connection a Partition can cut.
type inmemConn struct {
	net.Conn
	cut atomic.Bool
}

var errReset = &net.OpError{Op: "read", Net: "inmem", Err: os.NewSyscallError("read", syscall.ECONNRESET)}

func (c *inmemConn) Write(b []byte) (int, error) {
	if c.cut.Load() {
		return 0, fmt.Errorf("inmem link cut: %w", keepalive.ErrStale)
	}
	return c.Conn.Write(b)
}

func (c *inmemConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil && c.cut.Load() {
		return n, errReset
	}
	return n, err
}
