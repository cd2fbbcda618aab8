package wait

import (
	"time"

	"github.com/ringgate/ringgate/router/internal/provider"
)

// Where a queued request waits: a provider budget's line (provider.At
// says how it goes from one to another, and from the others), its
// tenant's line, where it waits for its own limits, or a level's.
type Stage uint8

const (
	NotQueued      Stage = iota
	InUpstreamLine       // provider.InUpstreamLine
	InModelLine          // provider.InModelLine
	InTenantLine         // after the provider's lines
	InLevelLine          // a level of the tenant's limits: its model's, its team's (package levels)
)

// BudgetAt is where the call waits among its provider's lines.
func (s Stage) BudgetAt() provider.At {
	switch s {
	case InUpstreamLine:
		return provider.InUpstreamLine
	case InModelLine:
		return provider.InModelLine
	}
	return provider.NotInLine
}

// stageOf is the stage of a provider's line.
func stageOf(a provider.At) Stage {
	switch a {
	case provider.InUpstreamLine:
		return InUpstreamLine
	case provider.InModelLine:
		return InModelLine
	}
	return NotQueued
}

// Outcome is how a queued request's last try ended.
type Outcome uint8

const (
	StillWaiting Outcome = iota
	Admitted
	RefusedForGood // too large for the limit, or room not due within the wait
	ToTenantLine   // the provider's budgets have room, the tenant not: its line next
	toBudgetLine   // a provider's budget has no room, or a line: that line next
	toLevelLine    // a level of the tenant's limits has no room: its line next
	RefusedByBudget
	SpillEnded    // the tenant's spill ended, or is ending: decided the usual way
	FallbackEnded // the owner answers again: routed to it
	Shadowed      // the tenant's limits, in shadow mode, refuse it: served uncharged
	Reloaded      // the config changed: decided again on the new one
	MovedAway     // handed over: decided by the new owner
	Spilled       // sealed for a spill: decided on it
)

// MayWait reports whether a request refused can wait for room with left
// of its wait budget: a slot frees with a call's end; a window's room when
// the refusal says (retryAfter), which must come before the wait is over.
func MayWait(concurrency bool, retryAfter, left time.Duration) bool {
	return concurrency || retryAfter < left
}
