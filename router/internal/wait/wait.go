// Package wait owns a queued request's wait: the loop that waits in line
// after line (package queue) for room and, at the head of each, makes the
// call's one decision again; which line is next when a try finds another
// limit full; and when a refused head tries again. A queue is a loop that
// waits for room and calls the same decision again, not a second
// implementation of it: the decision is the caller's (Call.Decide), as
// are what ends a wait before a try (Call.Overtaken) and what an outcome
// means (an answer, a hop, a decision made again elsewhere).
//
// It knows no HTTP, no router, no tenant: the call is what Call says of
// it, its lines are values (Lines), the client hanging up is a channel
// closed, and the time is the node's clock.
package wait

import (
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/router/internal/provider"
)

// Call is the waiting request as its waiter sees it.
type Call interface {
	// Overtaken is what ends the wait before a try (Reloaded,
	// MovedAway, FallbackEnded, SpillEnded), or StillWaiting. It is
	// asked first in every try, and forgets what refused the last one.
	Overtaken() Outcome
	// Check asks its tenant's limits, then its levels', charging
	// nothing: the first refusal, and level, 1 + the index of the level
	// that said it (0: its tenant); else what allows it.
	Check() (d limiter.Decision, level int)
	// Decide is its one decision, made from stage at.
	Decide(at Stage) Try
}

// Try is what a decision (Call.Decide) said of the call.
type Try struct {
	// Out: Admitted, or Shadowed (served uncharged); ToTenantLine:
	// others wait in its tenant's line, which it must not pass;
	// MovedAway, Spilled or SpillEnded: its room moved; StillWaiting:
	// refused, by Budget, or else by D.
	Out Outcome
	// Budget is the refusal of its provider's budgets (or others wait
	// in a budget's line).
	Budget *provider.Refusal
	// D is what refused it, its tenant's or level Level's (1 + its
	// index; 0: its tenant's); admitted, its rate-limit headers.
	D     limiter.Decision
	Level int
}

// Lines are the lines a call may wait in besides its provider's budgets'.
type Lines struct {
	// Own is its tenant's line for the call (nil: none, the tenant's
	// refusals are final); Spill, spilled, its spill's; Tenant the
	// tenant's line on this node.
	Own, Spill, Tenant *queue.Queue
	// Level is the line of level i of its limits (nil: its tenant's);
	// Flow its flow in the line of the budget that refused it (br).
	Level func(i int) *queue.Queue
	Flow  func(br *provider.Refusal) queue.Flow
}

// Config is what a waiter is made with (New).
type Config struct {
	Clock    clockwork.Clock
	Class    queue.Class
	Wait     time.Duration // its class's wait budget
	MaxDepth int           // of a class waiting in a line (queue.Queue.Wait)
	Window   time.Duration // its tenant's limits' window
	Shadow   bool          // its tenant's limits are in shadow mode: they refuse nothing
	Lines    Lines
}
