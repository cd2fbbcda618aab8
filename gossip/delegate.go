package gossip

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/memberlist"
)

// maxQueuedEvents bounds the log-event queue between memberlist's callbacks
// and the notifier goroutine (only log lines are dropped beyond it; the
// member view itself is never lossy).
const maxQueuedEvents = 1024

// Values of delegate.mergeView during one join: what the answering seed's
// state said about this member.
const (
	viewNone  int32 = iota // no report yet
	viewFresh              // the seed lists us alive at our address with our metadata
	viewStale              // the seed does not list us, or lists us stale
)

type viewEntry struct {
	m     Member
	valid bool // metadata decoded
}

type memberEvent struct {
	kind  string // join, leave, update
	m     Member
	err   error // metadata decode error
	isMe  bool
	metaN int
}

// delegate implements memberlist's Delegate, EventDelegate and MergeDelegate.
// Every method runs on memberlist goroutines, several of them with
// memberlist's node lock held: they only copy data, take short
// private locks and signal; they never call back into memberlist, never log
// synchronously and never block.
type delegate struct {
	name string

	metaMu sync.RWMutex
	meta   []byte
	state  State

	// view mirrors memberlist's alive+suspect members. It is maintained from
	// the event callbacks (called in order, under memberlist's node lock), so
	// it never reads memberlist's internal *Node values outside that lock.
	viewMu sync.RWMutex
	view   map[string]viewEntry

	evMu    sync.Mutex
	events  []memberEvent
	dropped int

	signal chan struct{} // cap 1: coalesced "something changed"

	mergeView atomic.Int32
}

func newDelegate(name string, meta []byte, s State) *delegate {
	return &delegate{
		name:   name,
		meta:   meta,
		state:  s,
		view:   make(map[string]viewEntry),
		signal: make(chan struct{}, 1),
	}
}

func (d *delegate) currentMeta() ([]byte, State) {
	d.metaMu.RLock()
	defer d.metaMu.RUnlock()
	return d.meta, d.state
}

func (d *delegate) setMeta(meta []byte, s State) {
	d.metaMu.Lock()
	d.meta, d.state = meta, s
	d.metaMu.Unlock()
}

// selfAddr is our gossip address as memberlist advertises it (recorded from
// our own join event during memberlist.Create).
func (d *delegate) selfAddr() string {
	d.viewMu.RLock()
	defer d.viewMu.RUnlock()
	return d.view[d.name].m.GossipAddr
}

// --- memberlist.Delegate ---

func (d *delegate) NodeMeta(limit int) []byte {
	meta, _ := d.currentMeta()
	if len(meta) > limit { // cannot happen: Start checks the size
		return nil
	}
	return bytes.Clone(meta)
}

func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// --- memberlist.EventDelegate ---

func (d *delegate) NotifyJoin(n *memberlist.Node)   { d.record("join", n) }
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.record("update", n) }
func (d *delegate) NotifyLeave(n *memberlist.Node)  { d.record("leave", n) }

func (d *delegate) record(kind string, n *memberlist.Node) {
	m := Member{Name: n.Name, GossipAddr: n.Address()}
	wm, err := decodeMeta(n.Meta)
	if err == nil {
		m.HTTPAddr, m.State, m.Pins, m.ConfigVersion, m.CannotReach = wm.H, wm.S, wm.P, wm.C, wm.U
	}

	d.viewMu.Lock()
	if kind == "leave" {
		delete(d.view, n.Name)
	} else {
		d.view[n.Name] = viewEntry{m: m, valid: err == nil}
	}
	d.viewMu.Unlock()

	d.evMu.Lock()
	if len(d.events) < maxQueuedEvents {
		d.events = append(d.events, memberEvent{kind: kind, m: m, err: err, isMe: n.Name == d.name, metaN: len(n.Meta)})
	} else {
		d.dropped++
	}
	d.evMu.Unlock()
	d.notify()
}

func (d *delegate) notify() {
	select {
	case d.signal <- struct{}{}:
	default:
	}
}

func (d *delegate) takeEvents() ([]memberEvent, int) {
	d.evMu.Lock()
	defer d.evMu.Unlock()
	ev, dr := d.events, d.dropped
	d.events, d.dropped = nil, 0
	return ev, dr
}

// --- memberlist.MergeDelegate ---

// NotifyMerge runs for join push/pulls, on both ends. On the joining end it
// sees the seed's state as it was before merging ours, which tells the rejoin
// loop whether the seed already knows this incarnation of us (same address,
// same metadata, alive). A report from an incoming join that overlaps our own
// join can only cause one extra early rejoin, which is harmless.
func (d *delegate) NotifyMerge(peers []*memberlist.Node) error {
	addr := d.selfAddr()
	meta, _ := d.currentMeta()
	fresh := false
	for _, p := range peers {
		if p.Name == d.name {
			fresh = p.State == memberlist.StateAlive && p.Address() == addr && bytes.Equal(p.Meta, meta)
			break
		}
	}
	if fresh {
		d.mergeView.CompareAndSwap(viewNone, viewFresh)
	} else {
		d.mergeView.Store(viewStale)
	}
	return nil
}

// mlLogWriter turns memberlist's "[LEVEL] memberlist: text" lines into slog
// records with message "memberlist" and the text in "detail".
type mlLogWriter struct{ l *slog.Logger }

func (w mlLogWriter) Write(p []byte) (int, error) {
	s := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for _, lv := range []struct {
		prefix string
		level  slog.Level
	}{
		{"[DEBUG] ", slog.LevelDebug},
		{"[INFO] ", slog.LevelInfo},
		{"[WARN] ", slog.LevelWarn},
		{"[ERR] ", slog.LevelError},
		{"[ERROR] ", slog.LevelError},
	} {
		if rest, ok := strings.CutPrefix(s, lv.prefix); ok {
			s, level = rest, lv.level
			break
		}
	}
	s = strings.TrimPrefix(s, "memberlist: ")
	// Expected for a few seconds whenever a member restarts at a new address
	// (the old incarnation still holds the name): not an error.
	if level == slog.LevelError && strings.HasPrefix(s, "Conflicting address") {
		level = slog.LevelWarn
	}
	// memberlist's probe and gossip loops can still be sending when Leave or
	// Shutdown closes the transport under them: expected, not an error.
	if level >= slog.LevelWarn && strings.Contains(s, "use of closed network connection") {
		level = slog.LevelDebug
	}
	w.l.Log(context.Background(), level, "memberlist", "detail", s)
	return len(p), nil
}
