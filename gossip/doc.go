// Package gossip owns cluster membership for ringgate: which gateway nodes are
// alive, the HTTP address each one serves on, and its State (active or
// draining). It is built on hashicorp/memberlist (SWIM gossip with Lifeguard
// suspicion) and exposes a small, copy-only view of the cluster:
//
//	n, err := gossip.Start(gossip.Config{Name: "gw-1", BindAddr: "10.0.0.1:7946",
//		HTTPAddr: "10.0.0.1:8080", Seeds: []string{"10.0.0.2:7946"}, SecretKey: key,
//		OnChange: func(ms []gossip.Member) { /* rebuild something */ }})
//	defer n.Leave(time.Second)
//
// The package knows nothing of rings, tenants, limits, HTTP handlers or Redis:
// consumers subscribe with Config.OnChange (or poll Members) and derive their
// own structures from the member list.
//
// Guarantees:
//   - Members lists memberlist's alive and suspect members (see Members for
//     why suspect members stay), self included, sorted by name; members whose
//     metadata cannot be decoded are left out.
//   - OnChange is delivered from a single goroutine, never concurrently with
//     itself, coalesced (a burst of changes gives one call with the final list)
//     and never from inside memberlist's locks or network loops.
//   - Start returns at once; joining the seeds runs in the background with
//     exponential backoff, and the seeds are re-joined every
//     Timing.RejoinInterval so that partitioned or reaped members, and members
//     restarted under the same name, find the cluster again.
//   - Leave and Shutdown are idempotent and may be called in any order.
package gossip
