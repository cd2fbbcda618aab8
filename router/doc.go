// Package router is the edge of a ringgate node: it takes a client's HTTP
// request, finds the tenant by its key, asks the tenant's limiter for room
// with a token estimate from reserve, hands the request to the upstream
// provider, streams the answer back and settles the real usage.
//
// It composes limiter, reserve and upstream (and, in a cluster, the ring and
// the peer hop); none of those knows about the others or about HTTP serving.
// It owns the client-facing contract of ../shared/interface.md: status codes,
// the OpenAI error shape, the x-ratelimit-* headers, and the admin endpoints.
//
// A request's limits are decided in one place: decide (rooms.go) builds the
// call's rooms and package admit composes them, all or none. The first try
// (firstTry) and a queued request's every try (package wait, through
// waiter.Decide) call it.
//
// What is one protocol of its own lives under router/internal, importing
// nothing of router (docs/design.md's "The code, in one page" says what
// each owns):
//
//   - tenant: the configured entities with limits, their cores, the config
//     in force;
//   - provider: the provider's budgets and their lines;
//   - levels: what a call holds of its tenant's model limit and team;
//   - wait: a queued request's wait, in line after line, around the one
//     decision;
//   - usage: a call's tokens, reserved and settled, and what they teach;
//   - away, fallback, moves: what an edge admits for a tenant it does not
//     count, its fallback episodes, the deltas it reports, and this node's
//     part in package handoff;
//   - spill, spillover: a hot tenant's spillover and the loop that runs it;
//   - hop, hopsign, deltaid, hangup: carrying, signing and naming what nodes
//     send each other, and watching a waiting client;
//   - wake: whether a node woken from a pause may decide yet;
//   - models: the /v1/models answer;
//   - cluster: the cluster view in force, the wait for it to change, the
//     members that left it;
//   - drain: the calls in flight and the node's drain;
//   - admin, adminview, status, metrics: the admin endpoints, what they show,
//     their JSON shapes and the Prometheus series;
//   - reqlog: a request's id, the node's name on answers, its log lines;
//   - reply: what the node writes back: the OpenAI error shape, the
//     rate-limit headers, an answer copied through.
package router
