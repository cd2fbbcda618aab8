package wait

import (
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/router/internal/provider"
)

// Waiter is a request waiting in lines for room: where it waits, and how
// its last try ended.
type Waiter struct {
	Out    Outcome          // how its last try ended
	Last   limiter.Decision // the tenant's (or a level's) last refusal, or its admission
	Tried  bool             // Last was said by a try
	Budget provider.Refusal // the last budget refusal
	At     Stage            // where it waits
	Level  int              // at InLevelLine: the level's index
	Waited time.Duration    // in all its lines

	call  Call
	clk   clockwork.Clock
	class queue.Class
	depth int
	lines Lines
	// tenantLine is where its tenant's refusals wait: its owner's, its
	// fallback share's, or, spilled, its spill's. waits: its tenant's
	// refusals are waited for (a spill's answer at once). checks: a
	// head in its tenant's or a level's line asks them first.
	tenantLine    *queue.Queue
	waits, checks bool
	deadline      time.Time
	// guard is how long after a rate's room is due a refused head tries
	// again (rateRetry); notBefore is when, refused on requests.
	guard     time.Duration
	notBefore time.Time
	line      *queue.Queue
	flow      queue.Flow
	next      int // toLevelLine: the level's index
}

// New makes the waiter of c. first is the refusal that sent it to its
// tenant's line, or to the line of the level that refused it (level: 1 +
// its index); on, the budget whose line it starts in; with neither it
// joins the tenant's line behind others, or the line of level level.
func New(c Call, cfg Config, first *limiter.Decision, on *provider.Refusal, level int) *Waiter {
	w := &Waiter{call: c, clk: cfg.Clock, class: cfg.Class, depth: cfg.MaxDepth, lines: cfg.Lines, At: InTenantLine,
		deadline: cfg.Clock.Now().Add(cfg.Wait),
		// A head refused by a rate tries again one bucket after the
		// room was due, not at its edge: requests let in the instant a
		// charge leaves the window would reach the provider packed at
		// its edge, and the provider counts them as they arrive, each
		// delayed a little differently on the way.
		guard: cfg.Window / limiter.Buckets}
	l := &cfg.Lines
	w.tenantLine = l.Own
	w.waits = w.tenantLine != nil
	if l.Spill != nil {
		// A spill's refusal is final (it answers at once, as on the
		// spill's first try): a spilled call waits here only for the
		// provider's budgets, in its spill's line behind the others.
		w.tenantLine, w.waits = l.Spill, false
	}
	if w.tenantLine == nil {
		w.tenantLine = l.Tenant // never waited in: its tenant's refusals are final
	}
	w.checks = w.waits && !cfg.Shadow
	w.line = w.tenantLine
	if first != nil {
		w.Last, w.Tried = *first, true
	}
	switch {
	case on != nil:
		w.Budget, w.At, w.line, w.flow = *on, stageOf(on.At), on.On.Queue(), l.Flow(on)
	case level > 0 && l.Level(level-1) != nil:
		w.Level = level - 1
		w.At, w.line = InLevelLine, l.Level(w.Level)
	}
	return w
}

// Wait waits in line after line until a try ends the wait, the wait
// budget is spent, the line is full or gone is closed (the client hung
// up).
func (w *Waiter) Wait(gone <-chan struct{}) error {
	for {
		w.Out = StillWaiting
		d, err := w.line.Wait(w.class, w.flow, w.depth, w.deadline, gone, w.try)
		w.Waited += d
		if err != nil || (w.Out != ToTenantLine && w.Out != toBudgetLine && w.Out != toLevelLine) {
			return err
		}
		switch w.Out {
		case ToTenantLine:
			w.At, w.line, w.flow = InTenantLine, w.tenantLine, queue.Flow{}
		case toLevelLine:
			w.At, w.Level, w.line, w.flow = InLevelLine, w.next, w.lines.Level(w.next), queue.Flow{}
		default:
			w.At, w.line, w.flow = stageOf(w.Budget.At), w.Budget.On.Queue(), w.lines.Flow(&w.Budget)
		}
		w.notBefore = time.Time{}
	}
}

// try is one try at the head of its line: whether the wait ends, and if
// not, when to try again (and on a Kick).
func (w *Waiter) try() (bool, time.Duration) {
	if out := w.call.Overtaken(); out != StillWaiting {
		w.Out = out
		return true, -1
	}
	if wait := w.clk.Until(w.notBefore); wait > 0 {
		return false, wait
	}
	if (w.At == InTenantLine || w.At == InLevelLine) && w.checks {
		// Its tenant and levels first: the head of their line waits
		// here for their room, not in a provider's line it would only
		// leave again when its turn came there.
		if d, level := w.call.Check(); !d.Allowed && !d.Moved {
			return w.tenantRefused(d, level)
		}
	}
	t := w.call.Decide(w.At)
	switch {
	case t.Out == Admitted || t.Out == Shadowed:
		w.Last, w.Out = t.D, t.Out // Shadowed: served uncharged, its budgets in hand
		if t.Out == Admitted {
			w.Tried = true
		}
		return true, 0
	case t.Budget != nil:
		return w.budgetRefused(t.Budget)
	case t.Out != StillWaiting:
		// Behind others in its tenant's own line, or its room moved.
		w.Out = t.Out
		return true, -1
	}
	return w.tenantRefused(t.D, t.Level)
}

// rateRetry is when a head refused on dim, with room due after, tries
// again: a bucket later. Refused on requests, no Kick brings it sooner (a
// call's end frees no request); on tokens a Kick may (a call settled
// below its reservation).
func (w *Waiter) rateRetry(dim limiter.Dimension, after time.Duration) time.Duration {
	after += w.guard
	if dim == limiter.Requests {
		w.notBefore = w.clk.Now().Add(after)
	}
	return after
}

// tenantRefused is the try's answer when the tenant's limits, or a
// level's (level: 1 + its index), refuse it (d); it holds no budget.
func (w *Waiter) tenantRefused(d limiter.Decision, level int) (bool, time.Duration) {
	w.Last, w.Tried = d, true
	if d.TooLarge || !w.waits || !MayWait(d.Limited == limiter.Concurrency, d.RetryAfter, w.clk.Until(w.deadline)) {
		w.Out = RefusedForGood
		return true, -1
	}
	if i := level - 1; i >= 0 && w.lines.Level(i) != nil {
		// A level refused it: it waits in the level's line.
		if w.At != InLevelLine || w.Level != i {
			w.Out, w.next = toLevelLine, i
			return true, -1
		}
	} else if w.At != InTenantLine {
		w.Out = ToTenantLine
		return true, -1
	}
	if d.Limited == limiter.Concurrency {
		// A call's end Kicks the line; the second covers one that
		// ends where no Kick is heard (a report lost).
		return false, time.Second
	}
	return false, w.rateRetry(d.Limited, d.RetryAfter)
}

// budgetRefused is the try's answer when a provider's budget refuses it
// (br), or others wait in the budget's line.
func (w *Waiter) budgetRefused(br *provider.Refusal) (bool, time.Duration) {
	w.Budget = *br
	switch {
	case !br.Waitable(w.clk.Until(w.deadline), MayWait):
		w.Out = RefusedByBudget
		return true, -1
	case stageOf(br.At) != w.At:
		w.Out = toBudgetLine
		return true, -1
	case br.D.Limited == limiter.Concurrency:
		return false, br.D.RetryAfter // and a Kick when a slot frees
	case !br.D.Degraded:
		// Blocks: a grant Kicks the line when it brings room; the
		// timer's guard is enough.
		return false, br.D.RetryAfter + w.guard
	}
	return false, w.rateRetry(br.D.Limited, br.D.RetryAfter)
}

// RefusalNow names what refuses a request of tokens that waited without its
// turn coming, from the limiter's view now, and when room is due; with
// room for it, the limit the others ahead of it take as they are let in
// (concurrency first, then requests, then tokens: one that is set).
func RefusalNow(d limiter.Decision, tokens int64) limiter.Decision {
	switch {
	case d.LimitConcurrency > 0 && d.InFlight >= d.LimitConcurrency:
		d.Limited, d.RetryAfter = limiter.Concurrency, time.Second
	case d.LimitRequests > 0 && d.RemainingRequests <= 0:
		d.Limited, d.RetryAfter = limiter.Requests, d.ResetRequests
	case d.LimitTokens > 0 && d.RemainingTokens < tokens:
		d.Limited, d.RetryAfter = limiter.Tokens, d.ResetTokens
	case d.LimitConcurrency <= 0 && d.LimitRequests > 0:
		// Behind others, where the limit is on requests: they take them.
		d.Limited, d.RetryAfter = limiter.Requests, max(d.ResetRequests, time.Second)
	case d.LimitConcurrency <= 0 && d.LimitTokens > 0:
		d.Limited, d.RetryAfter = limiter.Tokens, max(d.ResetTokens, time.Second)
	default:
		d.Limited, d.RetryAfter = limiter.Concurrency, time.Second
	}
	d.RetryAfter = max(d.RetryAfter, time.Millisecond)
	return d
}
