// Package e2e holds ringgate's multi-process end-to-end tests: the real
// binary, built once, runs as a fake provider and several gateway nodes
// behind HAProxy in TCP mode, while the tests drive load through HAProxy,
// scale the cluster up and drain a node, then check what reached the provider
// against each tenant's limits.
//
// The tests carry the build tag e2e and need haproxy on the PATH (or at
// /usr/sbin/haproxy):
//
//	go test -race -count=1 -tags e2e ./e2e/...
//
// Without haproxy they fail, unless RINGGATE_E2E_SKIP_MISSING=1 makes them
// skip. This file has no build tag so that the package exists for go vet.
package e2e
