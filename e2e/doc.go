// Package e2e holds ringgate's multi-process end-to-end tests: the real
// binary, built once, runs as a fake provider and several gateway nodes
// behind HAProxy in TCP mode, while the tests drive load through HAProxy,
// scale the cluster up and drain a node, then check what reached the provider
// against each tenant's limits.
//
// TestHAProxyScaleUpAndDrainWithRedis runs the same scenario with the nodes
// handing tenants over through Redis snapshots (a redis-server of its own,
// internal/redistest) and asserts the limits over the whole run, ring changes
// included; it logs both runs' figures side by side.
//
// The tests carry the build tag e2e and need haproxy on the PATH (or at
// /usr/sbin/haproxy), and redis-server for the Redis variant:
//
//	go test -race -count=1 -tags e2e ./e2e/...
//
// Without them they fail, unless RINGGATE_E2E_SKIP_MISSING=1 makes them
// skip. This file has no build tag so that the package exists for go vet.
package e2e
