// Package snapshot owns the snapshot format of a tenant's limiter state (a
// versioned, compact binary encoding) and the Redis store of those
// snapshots, so that a tenant's new owner can continue its windows after a
// ring change.
//
// Redis holds only snapshots: the state itself lives in RAM on the tenant's
// owner (package limiter). Every Store call is bounded by a small time
// budget and guarded by a breaker, so a slow or dead Redis costs a caller at
// most that budget once, then nothing until Redis answers again.
//
// The package knows the limiter's State type but nothing of HTTP, gossip,
// rings or routing: the ring's identity is an opaque number to it.
package snapshot
