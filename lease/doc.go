// Package lease keeps the provider's own limits — an upstream's, or one of
// its models', requests and tokens per window and calls in flight — for a
// whole cluster, with no network round trip per request.
//
// A shared store (Redis in production, memory in tests) holds each
// budget's sliding window in buckets of window/128. A node takes a block of
// a budget from it (Grant): up to so many requests and tokens, usable
// until the block expires, and charged in the store's window at the
// bucket of its expiry — the latest moment any of it can be used — so the
// window counts a block from the moment it is granted until a window
// after its last possible use. The node admits against its blocks in RAM.
// When a block expires (or the node drains) it gives it back (Return):
// the grant comes off the window and what was really used is charged at
// the buckets it was used in. A node that dies never gives its blocks
// back: they leave the window a window after they expire, which is exact,
// only later. Calls in flight are slots: a node holds so many under its
// name with a TTL that it renews; a dead node's slots lapse by themselves.
//
// A block's size follows the node's recent demand (requests and tokens it
// was asked for over about a block's life), so an idle node holds nothing
// a busy one needs; a block is renewed in the background when it falls
// below a fifth of its grant, or nears its expiry.
//
// When the store does not answer, a node keeps admitting on the blocks it
// holds. When they are spent, it does what the budget's OnStoreDown says:
// Share admits on a strict local share, the limit divided by the live
// members, on a local window charged at the outage's start as if the
// whole window were used (what the other nodes admitted before the outage
// is unknown here), so it opens as that window passes; Open admits
// without the provider limit; Closed refuses. Once the store answers
// again, what was admitted meanwhile is charged to it first.
//
// The package knows nothing of HTTP, gossip, tenants or the ring: the
// router asks Budgets to Take and Finish, the node runs a Leaser.
package lease
