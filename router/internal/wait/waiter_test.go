package wait

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
)

// fakeCall answers a waiter's tries from decide, and counts them.
type fakeCall struct {
	overtaken      Outcome
	check          limiter.Decision
	decide         func(n int, at Stage) Try
	tries, decided atomic.Int32
	checked        atomic.Int32
	lastAt         atomic.Uint32
}

func (f *fakeCall) Overtaken() Outcome { f.tries.Add(1); return f.overtaken }

func (f *fakeCall) Check() (limiter.Decision, int) { f.checked.Add(1); return f.check, 0 }

func (f *fakeCall) Decide(at Stage) Try {
	n := int(f.decided.Add(1))
	f.lastAt.Store(uint32(at))
	return f.decide(n, at)
}

func newTest(f *fakeCall, clk clockwork.Clock, levels ...*queue.Queue) (*Waiter, *queue.Queue) {
	own := &queue.Queue{Clock: clk}
	for _, q := range levels {
		q.Clock = clk
	}
	cfg := Config{Clock: clk, Class: queue.Interactive, Wait: time.Minute, MaxDepth: 10, Window: time.Minute,
		Lines: Lines{Own: own, Tenant: own,
			Level: func(i int) *queue.Queue {
				if i < len(levels) {
					return levels[i]
				}
				return nil
			}}}
	return New(f, cfg, nil, nil, 0), own
}

func refusedOn(dim limiter.Dimension, after time.Duration) limiter.Decision {
	return limiter.Decision{Limited: dim, RetryAfter: after}
}

// eventually waits (on the wall clock) until ok holds.
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("not %s after 5 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWaitAdmittedAtOnce(t *testing.T) {
	f := &fakeCall{check: limiter.Decision{Allowed: true}, decide: func(int, Stage) Try {
		return Try{Out: Admitted, D: limiter.Decision{Allowed: true, LimitRequests: 7}}
	}}
	w, _ := newTest(f, clockwork.NewFakeClock())
	if err := w.Wait(nil); err != nil {
		t.Fatal(err)
	}
	if w.Out != Admitted || !w.Tried || w.Last.LimitRequests != 7 || f.checked.Load() != 1 {
		t.Errorf("out %d tried %v last %+v checked %d: want admitted on its try, checked first", w.Out, w.Tried, w.Last, f.checked.Load())
	}
}

func TestWaitOvertakenDecidesNothing(t *testing.T) {
	f := &fakeCall{overtaken: Reloaded, decide: func(int, Stage) Try { return Try{Out: Admitted} }}
	w, _ := newTest(f, clockwork.NewFakeClock())
	if err := w.Wait(nil); err != nil || w.Out != Reloaded || f.decided.Load() != 0 {
		t.Errorf("err %v out %d decided %d: want reloaded, undecided", err, w.Out, f.decided.Load())
	}
}

func TestWaitTooLargeRefusedForGood(t *testing.T) {
	f := &fakeCall{check: limiter.Decision{Allowed: true}, decide: func(int, Stage) Try {
		d := refusedOn(limiter.Tokens, time.Second)
		d.TooLarge = true
		return Try{D: d}
	}}
	w, _ := newTest(f, clockwork.NewFakeClock())
	if err := w.Wait(nil); err != nil || w.Out != RefusedForGood || !w.Last.TooLarge {
		t.Errorf("err %v out %d: want refused for good", err, w.Out)
	}
}

// A level's refusal moves the request to the level's line, where its next
// try is made from.
func TestWaitLevelRefusalMovesToItsLine(t *testing.T) {
	lvl := &queue.Queue{}
	f := &fakeCall{check: limiter.Decision{Allowed: true}, decide: func(n int, _ Stage) Try {
		if n <= 2 {
			return Try{D: refusedOn(limiter.Concurrency, time.Second), Level: 1}
		}
		return Try{Out: Admitted}
	}}
	w, _ := newTest(f, clockwork.NewFakeClock(), lvl)
	done := make(chan error, 1)
	go func() { done <- w.Wait(nil) }()
	// Refused in its tenant's line, then at once in the level's, where it
	// waits.
	eventually(t, "refused in the level's line", func() bool { return f.decided.Load() == 2 && lvl.Waiting() == 1 })
	lvl.Kick() // a call's end
	if err := <-done; err != nil || w.Out != Admitted || Stage(f.lastAt.Load()) != InLevelLine {
		t.Errorf("err %v out %d decided at %d: want admitted from the level's line", err, w.Out, f.lastAt.Load())
	}
	if w.At != InLevelLine || w.Level != 0 {
		t.Errorf("at %d level %d: want in level 0's line", w.At, w.Level)
	}
}

// A head refused on requests tries again only a bucket after the room is
// due: a Kick before then decides nothing.
func TestWaitRequestsRetryNotBefore(t *testing.T) {
	clk := clockwork.NewFakeClock()
	f := &fakeCall{check: limiter.Decision{Allowed: true}, decide: func(n int, _ Stage) Try {
		if n == 1 {
			return Try{D: refusedOn(limiter.Requests, time.Second)}
		}
		return Try{Out: Admitted}
	}}
	w, own := newTest(f, clk)
	done := make(chan error, 1)
	go func() { done <- w.Wait(nil) }()
	eventually(t, "refused once", func() bool { return f.decided.Load() == 1 })
	own.Kick()
	eventually(t, "tried again", func() bool { return f.tries.Load() == 2 })
	if n := f.decided.Load(); n != 1 {
		t.Fatalf("decided %d times before the room was due, want 1", n)
	}
	clk.Advance(time.Second + time.Minute/limiter.Buckets)
	own.Kick() // its retry's timer may be set after the clock moved on
	if err := <-done; err != nil || w.Out != Admitted {
		t.Errorf("err %v out %d: want admitted once the room is due", err, w.Out)
	}
}

func TestWaitClientGone(t *testing.T) {
	f := &fakeCall{check: refusedOn(limiter.Concurrency, time.Second), decide: func(int, Stage) Try { return Try{Out: Admitted} }}
	w, _ := newTest(f, clockwork.NewFakeClock())
	gone := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- w.Wait(gone) }()
	eventually(t, "checked", func() bool { return f.checked.Load() == 1 })
	close(gone)
	if err := <-done; !errors.Is(err, queue.ErrCanceled) || f.decided.Load() != 0 || w.Out != StillWaiting {
		t.Errorf("err %v decided %d out %d: want canceled, refused by its check", err, f.decided.Load(), w.Out)
	}
}

func TestMayWait(t *testing.T) {
	if !MayWait(true, time.Hour, time.Second) || !MayWait(false, time.Second, 2*time.Second) || MayWait(false, 2*time.Second, 2*time.Second) {
		t.Error("a slot may always be waited for, a window's room only before the wait is over")
	}
}
