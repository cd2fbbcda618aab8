// Package reqlog owns what a node tells of a request beside its answer:
// the request's id (x-request-id: the client's when sane, else one made
// here), the node's name on its answers (x-ringgate-node), the refused
// lines that explain a 429 long after it was answered, and the optional
// access lines, one a request.
//
// Refused lines are bounded: at most one a second per tenant
// (TenantEvery) and NodeLines a second in all, each saying how many of
// its tenant's refusals it stands for (not_logged). Access lines are not
// bounded in rate (the operator asked for them), only in size.
//
// It knows nothing of tenants' state, limiters' workings, the cluster or
// how a request is decided: the router says what refused and what the
// client was answered, and this package writes it.
package reqlog
