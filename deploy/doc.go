// Package deploy holds how ringgate is deployed, and the tests that keep
// those recipes true: the Dockerfile's static build (at the repository's
// root), the Kubernetes manifests (k8s/), the HAProxy config in TCP mode
// (haproxy/, which the e2e tests run too) and the local cluster on
// loopback (local/, make cluster). It has no code of its own.
package deploy
