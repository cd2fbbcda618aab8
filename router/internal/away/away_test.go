package away

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/deltaid"
)

const t0 = int64(1_700_000_000_000_000_000)

func admitted(t *testing.T, l *Ledger, ids *deltaid.IDs) (*limiter.Ticket, *Entry) {
	t.Helper()
	tk, d := l.Share().Admit(t0, 10)
	if !d.Allowed {
		t.Fatalf("share refused: %+v", d)
	}
	return &tk, l.Admitted("o", &tk, 0, ids)
}

// A call's end is folded into an admission never sent, follows alone one
// the owner took, and joins the ledger behind one sent but not confirmed.
func TestLedgerFinished(t *testing.T) {
	ids := deltaid.New()
	l := NewLedger(time.Minute, time.Minute)
	tk, e := admitted(t, l, ids)
	if got := l.Finished(e, limiter.FinishDelta(tk, 10), ids); got != Amended {
		t.Fatalf("end of a call never sent: %v, want Amended", got)
	}
	if d := l.Delta(e); d.Requests != 1 || d.Slots != 0 {
		t.Errorf("amended entry %+v, want the admission with its slot released", d)
	}

	fail := errors.New("unreachable")
	tk, e = admitted(t, l, ids)
	if n := l.Report(func([]limiter.Delta) error { return fail }); n != 0 || l.Delivered() {
		t.Fatalf("a failed report took %d, delivered %v: want nothing taken, all kept", n, l.Delivered())
	}
	if got := l.Finished(e, limiter.FinishDelta(tk, 10), ids); got != Queued {
		t.Fatalf("end of a call sent, unconfirmed: %v, want Queued", got)
	}
	var sent []limiter.Delta
	if n := l.Report(func(ds []limiter.Delta) error { sent = ds; return nil }); n != 3 || !l.Delivered() {
		t.Fatalf("report took %d, delivered %v: want the 3 deltas, ledger empty", n, l.Delivered())
	}
	if sent[1].ID == 0 || sent[2].ID == 0 || sent[1].ID == sent[2].ID {
		t.Errorf("deltas sent %+v: want the admission and its release under IDs of their own", sent)
	}
	if got := l.Finished(e, limiter.Delta{Slots: -1}, ids); got != Alone {
		t.Errorf("end of a call reported: %v, want Alone", got)
	}
	if l.WaitsFor("o") || l.WaitsFor("p") {
		t.Error("an empty ledger waits for an owner")
	}
}

// A ledger is bounded: past maxEntries the older half goes.
func TestLedgerBounded(t *testing.T) {
	ids := deltaid.New()
	l := NewLedger(time.Minute, time.Minute)
	tk := NewLedger(time.Minute, time.Minute).Share().Tally(t0, 1)
	for range maxEntries + 1 {
		l.Admitted("o", &tk, 0, ids)
	}
	if n := len(l.pending); n != maxEntries/2+1 {
		t.Errorf("%d entries held, want %d", n, maxEntries/2+1)
	}
	if !l.WaitsFor("p") || l.WaitsFor("o") {
		t.Error("the ledger waits for the owner it could not reach, or not for a new one")
	}
}

// A burst of admissions is one report.
func TestReportSoonOnce(t *testing.T) {
	l := NewLedger(time.Minute, time.Minute)
	var runs atomic.Int32
	for range 10 {
		l.ReportSoon(func() { runs.Add(1) })
	}
	time.Sleep(reportSoon + 50*time.Millisecond)
	if n := runs.Load(); n != 1 {
		t.Errorf("%d reports for one burst, want 1", n)
	}
}

// An episode restarting for the same owner swaps its seed for the last.
func TestSwapSeed(t *testing.T) {
	l := NewLedger(time.Minute, time.Minute)
	a := limiter.State{Holder: "1"}
	if last := l.SwapSeed("o", a); last.Holder != "" {
		t.Errorf("first seed replaces %+v, want nothing", last)
	}
	if last := l.SwapSeed("o", limiter.State{Holder: "2"}); last.Holder != "1" {
		t.Errorf("a restart replaces %+v, want the last seed", last)
	}
	if last := l.SwapSeed("p", a); last.Holder != "" {
		t.Errorf("another owner's seed replaces %+v, want nothing", last)
	}
}

func TestSeen(t *testing.T) {
	var s Seen
	var h fasthttp.ResponseHeader
	h.Set("x-ratelimit-limit-requests", "100")
	h.Set("x-ratelimit-remaining-requests", "40")
	h.Set("x-ratelimit-limit-tokens", "1000")
	h.Set("x-ratelimit-remaining-tokens", "1000")
	if n := testing.AllocsPerRun(100, func() { s.NoteHeaders(t0, &h) }); n != 0 {
		t.Errorf("NoteHeaders allocates %v times", n)
	}
	if at, reqs, toks := s.Last(); at != t0 || reqs != 60 || toks != 0 {
		t.Errorf("seen %d, %d, %d; want %d, 60, 0", at, reqs, toks, t0)
	}
	full := limiter.Limits{Requests: 300, Tokens: 3000}
	fresh := func(int64) bool { return false }
	share := limiter.NewTenant(limiter.Limits{}, time.Minute, time.Minute)
	if how := s.Seed(share, t0+int64(time.Second), time.Minute, 3, full, fresh); how != "owner_answers" {
		t.Errorf("seeded from %s, want owner_answers", how)
	}
	if u := share.Usage(t0 + int64(time.Second)); u.Requests != 20 {
		t.Errorf("share charged %d, want 1/3 of the 60 seen", u.Requests)
	}
	share = limiter.NewTenant(limiter.Limits{}, time.Minute, time.Minute)
	if how := s.Seed(share, t0, time.Minute, 3, full, func(int64) bool { return true }); how != "full_window" {
		t.Errorf("stale answers seeded from %s, want full_window", how)
	}
	if u := share.Usage(t0); u.Requests != 100 || u.Tokens != 1000 {
		t.Errorf("share charged %+v, want 1/3 of the limits", u)
	}
}

// Held deltas wait for their tenant's release, and are due once they have
// waited HeldFor for a tenant not being taken over.
func TestHeld(t *testing.T) {
	var h Held
	no := func() bool { return false }
	if h.Hold("a", t0, time.Minute, "", []limiter.Delta{{Requests: 1}}, func() bool { return true }) {
		t.Fatal("held deltas the node counts")
	}
	h.Hold("a", t0, time.Minute, "n1", []limiter.Delta{{Requests: 1}, {Slots: -1}}, no)
	h.Hold("b", t0, time.Minute, "n2", []limiter.Delta{{Requests: 1}}, no)
	h.Hold("c", t0, time.Minute, "n2", []limiter.Delta{{Requests: 1}}, no)
	var got []Kept
	h.Release("a", func(ks []Kept) { got = ks })
	if len(got) != 2 || got[0].From != "n1" || got[0].At != t0 || got[1].Delta.Slots != -1 {
		t.Errorf("released %+v, want a's two deltas in order", got)
	}
	state := func(name string) (bool, bool) { return name == "c", false }
	if due := h.Due(t0+int64(HeldFor)-1, state); len(due) != 0 {
		t.Errorf("due before HeldFor: %v", due)
	}
	due := h.Due(t0+int64(HeldFor), state)
	if len(due) != 1 || len(due["b"]) != 1 || len(h.by) != 0 {
		t.Errorf("due %v, left %v: want b's, c's dropped (gone), none left", due, h.by)
	}
	// Deltas held past a window and HeldFor are forgotten at the next hold.
	h.Hold("d", t0, time.Minute, "", []limiter.Delta{{Requests: 1}}, no)
	h.Hold("e", t0+int64(time.Minute+HeldFor), time.Minute, "", []limiter.Delta{{Requests: 1}}, no)
	if _, ok := h.by["d"]; ok {
		t.Error("deltas for a tenant never taken over outlive a window")
	}
}

type countDrops struct{ n atomic.Int32 }

func (c *countDrops) Inc() { c.n.Add(1) }

// Deltas are tried again until they get through; without a path they are
// not; past MaxRetries running, a failure is dropped and counted; quit ends
// the tries.
func TestRetries(t *testing.T) {
	var rs Retries
	var drops countDrops
	quit := make(chan struct{})
	var tries atomic.Int32
	rs.Deliver(time.Minute, quit, &drops, func() error {
		if tries.Add(1) < 3 {
			return ErrUndelivered
		}
		return nil
	})
	if n := tries.Load(); n != 3 {
		t.Errorf("%d tries, want 3", n)
	}
	tries.Store(0)
	rs.Deliver(time.Minute, quit, &drops, func() error { tries.Add(1); return ErrNoPath })
	if n := tries.Load(); n != 1 {
		t.Errorf("%d tries without a path, want 1", n)
	}
	rs.running.Store(MaxRetries)
	rs.Deliver(time.Minute, quit, &drops, func() error { return ErrUndelivered })
	if drops.n.Load() != 1 || rs.Running() != MaxRetries {
		t.Errorf("%d dropped, %d running: want 1 dropped past the bound", drops.n.Load(), rs.Running())
	}
	rs.running.Store(0)
	done := make(chan struct{})
	go func() {
		defer close(done)
		rs.Deliver(time.Minute, quit, &drops, func() error { return ErrUndelivered })
	}()
	time.Sleep(100 * time.Millisecond)
	close(quit)
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("tries go on after quit")
	}
}

type node struct {
	now  atomic.Int64
	left sync.Map
}

func (n *node) Now() int64             { return n.now.Load() }
func (n *node) Window() time.Duration  { return time.Minute }
func (n *node) Left(owner string) bool { _, ok := n.left.Load(owner); return ok }

// An owner is named while the node fell back on it lately or holds reports
// for it, and not once it left the view.
func TestUnreachables(t *testing.T) {
	var u Unreachables
	var mu sync.Mutex
	var told [][]string
	u.SetHook(func(owners []string) {
		mu.Lock()
		told = append(told, owners)
		mu.Unlock()
	})
	last := func() []string {
		mu.Lock()
		defer mu.Unlock()
		if len(told) == 0 {
			return nil
		}
		return told[len(told)-1]
	}
	n := &node{}
	n.now.Store(t0)
	ids := deltaid.New()
	l := NewLedger(time.Minute, time.Minute)
	tk := NewLedger(time.Minute, time.Minute).Share().Tally(t0, 1)
	l.Admitted("o", &tk, 0, ids)
	u.Note("o", l, n)
	u.Note("p", NewLedger(time.Minute, time.Minute), n)
	wait := func(want []string) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if slices.Equal(last(), want) {
				return
			}
		}
		t.Fatalf("named %v, want %v", last(), want)
	}
	wait([]string{"o", "p"})
	n.now.Add(int64(NamedFor) + 1) // o's report is undelivered, p has none
	wait([]string{"o"})
	n.left.Store("o", true)
	wait([]string{})
}

func TestShareOf(t *testing.T) {
	l, open := ShareOf(limiter.Limits{Requests: 10, Tokens: 0, Concurrency: 4}, 3)
	if !open || l != (limiter.Limits{Requests: 3, Concurrency: 1}) {
		t.Errorf("share %+v open %v, want 3 requests, no token limit, 1 slot, open", l, open)
	}
	if l, open = ShareOf(limiter.Limits{Requests: 2}, 3); open || l.Requests != -1 {
		t.Errorf("share %+v open %v, want closed: a limit below the member count", l, open)
	}
}
