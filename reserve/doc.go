// Package reserve owns the gateway's token arithmetic for two-phase
// reservation: local prompt token counts (Tokenizer), a recent history of
// completion lengths per (tenant, model) (Estimator), the estimate reserved
// before an upstream call and the settlement against the usage the provider
// reports afterwards.
//
// The flow the router composes is:
//
//	r := est.Estimate(Key{tenant, model}, tok.Count(model, prompt), maxTokens, true)
//	// reserve r.Total against the tenant's tokens-per-window limit ...
//	// call the provider ...
//	delta := est.Settle(r, Usage{Prompt: p, Completion: c})
//	// delta > 0: debit the excess; delta < 0: credit -delta back.
//
// Reserving max_tokens upfront would lock away most of a tenant's budget
// while requests are in flight (a request asking for 2000 tokens that
// produces 150 holds 13x what it uses); the estimate instead reserves
// min(max_tokens, ceil(1.5 x recent average completion)), so the
// over-reservation per in-flight request is about half the typical
// completion and is returned at settlement.
//
// The package deliberately knows nothing of HTTP, wire formats, gossip,
// Redis or the limiter's data structures: it takes and returns plain
// integers and small value types.
package reserve
