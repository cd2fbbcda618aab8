package lease

import (
	"time"

	"github.com/ringgate/ringgate/limiter"
)

// The configured limit is a ceiling: the provider's key may be shared with
// other consumers, or the provider may allow less. Its answers say what is
// really left (OpenAI's x-ratelimit-remaining-*/reset-*, Anthropic's
// anthropic-ratelimit-*, a 429's retry-after). When that is less than the
// cluster's window leaves, the difference is used by someone else: it is
// charged to the store's window as usage of its own, in the bucket that
// makes it leave the window when the provider says its limit resets, so
// every node learns it at its next grant. It is charged again whenever the
// provider says so again, and forgotten when it stops: the budget grows
// back as the provider allows.

// learnBelow: the provider's remaining is taken into account when under
// this percentage of the configured limit.
const learnBelow = 20

// Observed is what a provider's answer says of one dimension.
type Observed struct {
	Limited   bool          // the answer carried the dimension's headers
	Limit     int64         // the limit the provider says it applies; 0: not said
	Remaining int64         // what the provider says is left
	Reset     time.Duration // until the provider's window is whole again
}

// Observe takes what a provider's answer at now said of requests and
// tokens. It costs a lock and a few comparisons; the charge goes to the
// store with the budget's next round.
func (b *Budget) Observe(now int64, requests, tokens Observed) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.outage.since != 0 || b.storeless {
		return // the share has no cluster window to correct
	}
	// A provider that says its limit is below the configured one is
	// believed (until it says otherwise): grants use it.
	before := b.limitsLocked()
	if requests.Limited && requests.Limit > 0 {
		b.provider.limits.Requests = requests.Limit
	}
	if tokens.Limited && tokens.Limit > 0 {
		b.provider.limits.Tokens = tokens.Limit
	}
	if after := b.limitsLocked(); after.Requests < before.Requests || after.Tokens < before.Tokens {
		b.spendBlocks() // granted under the higher limit
	}
	var missing Amount
	l := b.limitsLocked()
	// Far from the limit there is nothing to protect, and the window's
	// figure (from this node's last grant) may be behind the others'
	// grants since: only a provider close to its limit is listened to.
	if requests.Remaining > l.Requests*learnBelow/100 {
		requests.Limited = false
	}
	if tokens.Remaining > l.Tokens*learnBelow/100 {
		tokens.Limited = false
	}
	if requests.Limited && l.Requests > 0 {
		missing.Requests = b.missing(l.Requests, b.stats.Used.Requests+b.provider.external.Requests, requests.Remaining)
	}
	if tokens.Limited && l.Tokens > 0 {
		missing.Tokens = b.missing(l.Tokens, b.stats.Used.Tokens+b.provider.external.Tokens, tokens.Remaining)
	}
	if missing.Requests == 0 && missing.Tokens == 0 {
		return
	}
	reset := max(requests.Reset, tokens.Reset, time.Duration(b.width))
	// A charge in bucket c leaves the window at bucket c+Span+1.
	bucket := (now+int64(reset))/b.width - Span - 1
	bucket = max(bucket, now/b.width-Span)
	b.provider.externalUses = appendUse(b.provider.externalUses, bucket, missing)
	b.provider.external.Requests += missing.Requests
	b.provider.external.Tokens += missing.Tokens
	b.stats.Corrections++
	b.wake()
}

// missing is what the provider counts as used beyond what the cluster's
// window holds, when its remaining is below what the window leaves.
func (b *Budget) missing(limit, used, remaining int64) int64 {
	if remaining < 0 {
		return 0
	}
	believed := limit - used
	if remaining >= believed {
		return 0
	}
	return believed - remaining
}

// limitsLocked is the configured limits, lowered to what the provider said
// it applies; b.mu is held.
func (b *Budget) limitsLocked() limiter.Limits {
	l := b.cfg.Limits
	if b.provider.limits.Requests > 0 && l.Requests > 0 {
		l.Requests = min(l.Requests, b.provider.limits.Requests)
	}
	if b.provider.limits.Tokens > 0 && l.Tokens > 0 {
		l.Tokens = min(l.Tokens, b.provider.limits.Tokens)
	}
	return l
}
