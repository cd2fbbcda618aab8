// Package upstream owns talking to LLM providers: their wire formats
// ("dialects": OpenAI and Anthropic), the preparation of a client's request
// for the provider, the extraction of token usage from JSON answers and SSE
// streams, and the HTTP client that carries all of it.
//
// The dialect half (ParseRequest, PrepareBody, UsageFromJSON, StreamFilter,
// ErrorBody) is pure byte-in/byte-out code: it has no I/O and no shared state.
//
// The package must know nothing of tenants, limits, gossip or Redis: it tells
// the caller what a request asks for and what a response cost, and the caller
// decides what that means.
package upstream
