// Package limiter owns the in-RAM admission decision for one tenant: requests
// per window, tokens per window and concurrency, checked together and charged
// together.
//
// Every dimension is a Window: a ring of time buckets that counts charges for a
// little longer than the window, never shorter (but for the width's rounding
// down to whole nanoseconds: up to 127 ns), so that at no instant can the
// charges inside any trailing window exceed the limit. A concurrency slot is a
// charge on a Window whose length is the slot TTL: releasing it credits the
// charge back, and a slot whose holder vanished expires with its bucket. Time
// is passed in by the caller (Unix nanoseconds) so tests drive a fake clock
// and buckets mean the same thing on every node; the time a tenant counts
// at is the newest it has seen, its own clock's or one a little ahead named
// by another node's state or delta (clock.go).
//
// The package must know nothing of HTTP, gossip, Redis or token estimation:
// the router composes it with those.
package limiter
