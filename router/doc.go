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
// (firstTry) and a queued request's every try (waiter.try) call it.
//
// What is one protocol of its own lives under router/internal, importing
// nothing of router: hop carries requests between nodes over an injected
// network (Inmem in tests); hangup watches a waiting call's client
// connection; hopsign signs and checks what nodes send each other;
// deltaid names the deltas a node sends and skips one applied before;
// metrics holds the node's Prometheus series; status the admin
// endpoints' JSON shapes; admin answers those endpoints (their paths, the
// access rule, asking an owner or every member), reading the node through
// a Source the router implements; away keeps what a node admits for
// tenants it does not count (fallback ledgers, the owners it cannot
// reach) and the deltas it holds or sends again; tenant holds the
// configured entities with limits, their cores made at first use, and
// the config in force, put in force by a reload; adminview builds what
// the admin endpoints show of this node (the cluster, the upstreams, a
// tenant's or a team's view) from the tenant model: the Source admin
// reads; moves is this node's part in package handoff (holding, freezing,
// fetching a tenant's state) and delivers the deltas of calls that end at
// an edge to the node that counts their tenant.
package router
