package limiter

import (
	"slices"
	"strings"
)

// Concurrency slots know which node runs the call. A tenant's owner counts
// its own calls in slots and, in away, the calls still running on other
// nodes: on a previous owner after a handoff, on an edge that admitted them
// under its fallback share. Every slot counts against the limit; when a
// node is declared dead its calls died with it, and DropNode frees their
// slots at once instead of after the slot TTL.

// NodeSlots are the slots of calls running on one node.
type NodeSlots struct {
	Node  string
	Slots WindowState
}

// slotsUsed is every slot held, here and away, after advance.
func (t *Tenant) slotsUsed() int64 {
	n := t.slots.used()
	if len(t.away) > 0 {
		for _, w := range t.away {
			n += w.used()
		}
	}
	return n
}

// slotsFit reports whether one more slot fits, after advance.
func (t *Tenant) slotsFit() bool {
	return t.slots.limit <= 0 || t.slotsUsed()+1 <= t.slots.limit
}

// emptySlotWindow is an empty window with the slots window's width, limit
// and head.
func (t *Tenant) emptySlotWindow() *Window {
	w := t.slots
	w.reset()
	w.newest = 0
	return &w
}

// awayWindow is the window of node's calls, made on first use.
func (t *Tenant) awayWindow(node string) *Window {
	w := t.away[node]
	if w == nil {
		w = t.emptySlotWindow()
		if t.away == nil {
			t.away = make(map[string]*Window)
		}
		t.away[node] = w
	}
	return w
}

func (t *Tenant) exportAway() []NodeSlots {
	if len(t.away) == 0 {
		return nil
	}
	out := make([]NodeSlots, 0, len(t.away))
	for n, w := range t.away {
		if ws := w.export(); len(ws.Buckets) > 0 {
			out = append(out, NodeSlots{Node: n, Slots: ws})
		}
	}
	slices.SortFunc(out, func(a, b NodeSlots) int { return strings.Compare(a.Node, b.Node) })
	return out
}

func (t *Tenant) importAway(away []NodeSlots) {
	t.away = nil
	for _, ns := range away {
		t.awayWindow(ns.Node).merge(ns.Slots)
	}
}

// DropNode forgets the slots of calls running on node: it is gone, and its
// calls with it. It returns how many slots it freed.
func (t *Tenant) DropNode(now int64, node string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	t.changed()
	if now < t.logUntil {
		if t.awayDropped == nil {
			t.awayDropped = make(map[string]bool)
		}
		t.awayDropped[node] = true
	}
	w := t.away[node]
	if w == nil {
		return 0
	}
	delete(t.away, node)
	return w.used()
}

// AwayNodes lists the nodes whose calls hold slots here.
func (t *Tenant) AwayNodes() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.away) == 0 {
		return nil
	}
	out := make([]string, 0, len(t.away))
	for n := range t.away {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// ApplyFrom adds a delta made on node from: its slots are that node's
// calls. "" is this node.
func (t *Tenant) ApplyFrom(now int64, from string, d Delta) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	t.changed()
	d.Bucket = t.history.inWindows(d.Bucket, &t.requests, false)
	d.SlotBucket = t.history.inWindows(d.SlotBucket, &t.slots, true)
	t.catchUpDelta(d)
	t.requests.adjust(d.Bucket, d.Requests)
	t.tokens.adjust(d.Bucket, d.Tokens)
	if from == "" {
		t.applyOwn(d.SlotBucket, d.Slots)
	} else {
		switch {
		case d.Slots != 0 && now < t.logUntil:
			if t.awayLog == nil {
				t.awayLog = make(map[string][]Bucket)
			}
			t.awayLog[from] = append(t.awayLog[from], Bucket{Index: d.SlotBucket, Value: d.Slots})
		case now >= t.logUntil:
			t.awayLog, t.awayDropped = nil, nil // a window past the Import: not read again
		}
		if w := t.away[from]; w != nil || d.Slots > 0 {
			// A release for a node whose slots were dropped already
			// changes nothing.
			t.awayWindow(from).adjust(d.SlotBucket, d.Slots)
		}
	}
}

// As is s as node self holds it: s.Holder's slots (the writer's own calls)
// go to Away under its name, and the slots Away lists for self come home
// to Slots. A state with no Holder is self's already.
func (s State) As(self string) State {
	if s.Holder == "" || s.Holder == self {
		s.Holder = ""
		return s
	}
	out := State{Requests: s.Requests, Tokens: s.Tokens, Slots: WindowState{Width: s.Slots.Width, Head: s.Slots.Head}}
	if len(s.Slots.Buckets) > 0 {
		out.Away = append(out.Away, NodeSlots{Node: s.Holder, Slots: s.Slots})
	}
	for _, ns := range s.Away {
		if ns.Node == self {
			out.Slots = ns.Slots
		} else {
			out.Away = append(out.Away, ns)
		}
	}
	return out
}
