// Package fakeupstream is a test and demo tool: a fake LLM provider that
// imitates the wire formats of the OpenAI-compatible API (chat completions,
// legacy completions, embeddings) and of the Anthropic Messages API, both as
// plain JSON and as server-sent event streams.
//
// It is used by ringgate's tests, by latency benchmarks (as the "direct"
// baseline) and by the `ringgate demo` command. It knows nothing of
// ringgate's limits: it answers every request it receives (unless given
// provider limits of its own, below), records what it saw (see Record) and
// reports token usage the way the real providers do, so that the gateway in
// front of it can be checked against the numbers.
//
// Generated text is made of 4-byte pieces such as " the" and " and": each
// piece is one token for the default counter ((len+3)/4) and for the common
// BPE tokenizers (cl100k_base, o200k_base), so a completion of N tokens is
// counted as N tokens by any of them. A stream carries one piece per chunk.
//
// Endpoints (all POST with a JSON body):
//
//	/v1/chat/completions  chat.completion / chat.completion.chunk
//	/v1/completions       text_completion
//	/v1/embeddings        list of embeddings
//	/v1/messages          Anthropic message / Anthropic stream events
//	/v1/responses         OpenAI Responses: response / typed events ending in response.completed
//
// and, for out-of-process tests, GET /_records (JSON array of Record, without
// bodies), GET /_stats (Stats), GET /_limits (the ProviderLimits in force),
// POST /_limits (a ProviderLimits in JSON: replaces the limits, see
// SetLimits) and POST /_reset.
//
// # Provider limits
//
// By default the server has no limits of its own. With Options.Limits it
// enforces true limits the way a real provider does, so that tests can
// count how often the gateway in front of it breaches them (Stats,
// Breaches, Record.RateLimited). /v1/messages is the Anthropic kind, the
// other paths are the OpenAI kind. The rules are exact:
//
//   - Requests and tokens: a sliding window of length Window (default one
//     minute). A request arriving at t is admitted only if the requests and
//     the tokens charged by the requests admitted in (t-Window, t], plus its
//     own, stay within Requests and Tokens. So at most Requests requests are
//     admitted and at most Tokens tokens charged in any window of that
//     length ending at an arrival. Every charge is kept with its time (a
//     ring per dimension, bounded by the limit), not in buckets; a charge
//     made at t leaves the window at exactly t+Window.
//   - Concurrency: at most Concurrency admitted requests in flight, from
//     their arrival until their answer is complete (for a stream: just
//     before its last event is written, or when it is cut), as InFlight
//     counts them.
//   - Per model: ProviderLimits.Models gives a model (the body's "model")
//     requests, tokens and concurrency limits of its own in the same
//     window. A request is admitted only if the upstream-wide limits and its
//     model's all have room; it is then charged on all of them, and if
//     refused on none. Refused requests charge nothing.
//   - Token charge, at arrival (Record.TokenCharge): the prompt estimate
//     (Options.CountTokens over the prompt, as in Record.PromptTokens) plus,
//     for the OpenAI kind, max(max_completion_tokens, or else max_tokens,
//     0), and for Anthropic max(max_tokens, 0). Embeddings charge the
//     prompt estimate. As with the real providers' up-front estimate, the
//     charge is not corrected when the answer is done.
//   - The decision is made at arrival, before Options.Latency. Requests
//     answered with Options.Status and invalid requests (unknown path, not
//     a POST, body not a JSON object) are not subject to the limits.
//
// A refused request is answered 429 (after Latency) in the provider's error
// shape, OpenAI
//
//	{"error":{"message":"…","type":"requests"|"tokens","param":null,"code":"rate_limit_exceeded"}}
//
// (type "requests" also for a concurrency limit) or Anthropic
//
//	{"type":"error","error":{"type":"rate_limit_error","message":"…"}}
//
// with a truthful retry-after: the seconds, rounded up, until enough of the
// oldest charges have left the window for the request to fit every window
// limit. It is left out when the wait cannot be known: a concurrency limit
// is full, or the request alone is over a token limit (it never fits). The
// refusal counts as a breach (Stats) and the record says so (RateLimited,
// LimitedBy).
//
// Every 200 and every such 429 carries the provider's rate-limit headers
// for the limited dimensions: OpenAI x-ratelimit-limit-requests,
// x-ratelimit-remaining-requests, x-ratelimit-reset-requests (a Go duration
// rounded up to the millisecond: "1s", "120ms", "1.5s") and the same with
// -tokens; Anthropic anthropic-ratelimit-requests-limit, -remaining, -reset
// (an RFC 3339 time with milliseconds) and anthropic-ratelimit-tokens-*.
// Remaining is what is left in the window when the answer is written (for a
// 200 this request's charge included); reset is when every current charge
// will have left the window (the limit fully replenished). Where a model has
// a limit of its own in a dimension, the headers report the model's values
// when its remaining is lower than the upstream-wide one. There are no
// concurrency headers and no Anthropic input/output-tokens headers.
//
// The limits can be changed at run time (SetOptions, SetLimits, POST
// /_limits): the new values apply at once to the charges in the window and
// to the requests in flight. Removing a dimension's limit forgets its
// charges, so a limit set afresh starts from an empty window. Reset zeroes
// the counters but keeps the windows: what was charged stays charged.
package fakeupstream
