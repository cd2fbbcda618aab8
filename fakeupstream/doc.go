// Package fakeupstream is a test and demo tool: a fake LLM provider that
// imitates the wire formats of the OpenAI-compatible API (chat completions,
// legacy completions, embeddings) and of the Anthropic Messages API, both as
// plain JSON and as server-sent event streams.
//
// It is used by ringgate's tests, by latency benchmarks (as the "direct"
// baseline) and by the `ringgate demo` command. It knows nothing of
// ringgate's limits: it answers every request it receives, records what it
// saw (see Record) and reports token usage the way the real providers do, so
// that the gateway in front of it can be checked against the numbers.
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
//
// and, for out-of-process tests, GET /_records (JSON array of Record, without
// bodies) and POST /_reset.
package fakeupstream
