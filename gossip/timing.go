package gossip

import (
	"errors"
	"time"

	"github.com/hashicorp/memberlist"
)

// Timing holds the failure-detection and anti-entropy knobs. A zero field
// takes the value from LANFast, so the zero Timing is LANFast.
type Timing struct {
	// ProbeInterval: each member probes one other member (round robin) this
	// often. Bounds how soon a crash is first noticed.
	ProbeInterval time.Duration
	// ProbeTimeout: how long to wait for a direct ack before asking
	// IndirectChecks other members to probe. Must be < ProbeInterval.
	ProbeTimeout time.Duration
	// GossipInterval: how often queued broadcasts (alive, suspect, dead,
	// metadata updates) are sent to a few random members.
	GossipInterval time.Duration
	// PushPullInterval: how often a full state exchange with one random
	// member repairs anything a lost UDP broadcast missed.
	PushPullInterval time.Duration
	// DeadNodeReclaimTime: a name held by a dead member may be taken by a
	// member at another address once it has been dead this long (a restart at
	// a new address). Without it the name is refused until the dead entry is
	// reaped (GossipToTheDeadTime, 30 s, measured 37-54 s).
	DeadNodeReclaimTime time.Duration
	// RejoinInterval: how often the seeds are joined again once joined.
	RejoinInterval time.Duration
	// SuspicionMult: the minimum suspicion timeout is
	// SuspicionMult * ProbeInterval * max(1, log10(N)).
	SuspicionMult int
	// SuspicionMaxTimeoutMult: the suspicion timeout starts at
	// SuspicionMaxTimeoutMult times the minimum and shrinks towards the
	// minimum as other members independently confirm the suspicion.
	SuspicionMaxTimeoutMult int
}

// LANFast is tuned for a loopback or LAN cluster of up to ~10 members, so that
// a crashed member is suspected within ~2 s and removed within ~5 s.
//
// Why these figures (memberlist LAN defaults detect a crash in 5.8-7.8 s):
//
//   - ProbeInterval 400 ms. Members probe round robin, so some survivor
//     probes the crashed member within about one interval (at worst N-1
//     intervals for a given survivor) and declares it suspect at the end of
//     that interval: suspect after ~0.5-1.5 s in small clusters.
//   - ProbeTimeout 200 ms. LAN/loopback RTT is well under 1 ms; 200 ms still
//     absorbs GC pauses and scheduler stalls (race detector, 2 shared cores),
//     and leaves half the probe interval for the indirect probes and the TCP
//     fallback before a member is suspected.
//   - SuspicionMult 4: minimum suspicion timeout 4 x 400 ms = 1.6 s for
//     N <= 10 (log10 scaling above). That is the time a wrongly suspected
//     member (GC pause, lost packets) has to refute before it is removed;
//     about 3 gossip rounds plus probe round trips is plenty on a LAN.
//   - SuspicionMaxTimeoutMult 2: the timer starts at 3.2 s and falls to
//     1.6 s as SuspicionMult-2 = 2 other members confirm (memberlist expects
//     no confirmations in clusters of 3 or fewer and then uses 1.6 s). The
//     default 6 would allow 9.6 s when confirmations are slow.
//     Removal = suspect time + 1.6..3.2 s: ~2-4.5 s, under the 5 s target.
//   - GossipInterval 100 ms (default 200 ms): suspect/dead/alive/metadata
//     broadcasts reach every member in a few hundred ms, so all members
//     agree quickly and confirmations arrive before the timer runs out.
//   - PushPullInterval 5 s (default 30 s): full state exchange repairs a
//     missed draining/active update within seconds; a state is ~100 B per
//     member, so this is cheap for a gateway-sized cluster.
//   - DeadNodeReclaimTime 1 s: a member restarted at a new address is
//     accepted 1 s after its old incarnation is declared dead instead of after
//     30-50 s. It can be short because it only ever applies to a dead entry:
//     an alive or suspect member keeps its name and address regardless.
//   - RejoinInterval 5 s: heals partitions (members that declared each other
//     dead never probe each other again) within ~5 s. While a seed still
//     reports a stale view of this member (just restarted, or just healed),
//     the rejoin runs every ProbeInterval instead, for up to 25 rounds.
//
// Measured on loopback with -race, 2 shared cores, 12 crashes per size
// (GOSSIP_MEASURE=12, TestMeasureDetection; TestCrashDetection logs one):
//
//	3 members: suspected 0.69/0.70/1.1 s (min/median/max), removed by all 2.29/2.31/2.70 s
//	5 members: suspected 0.60/1.03/1.5 s, removed by all 2.21/2.70/3.48 s
//
// A graceful Leave is seen by all in ~0.2 s; a member restarted at a new
// address is accepted ~4 s after the crash (removal + DeadNodeReclaimTime +
// one fast rejoin); one isolated for ~0.7 s is suspected, refutes and is
// never removed.
var LANFast = Timing{
	ProbeInterval:           400 * time.Millisecond,
	ProbeTimeout:            200 * time.Millisecond,
	GossipInterval:          100 * time.Millisecond,
	PushPullInterval:        5 * time.Second,
	DeadNodeReclaimTime:     1 * time.Second,
	RejoinInterval:          5 * time.Second,
	SuspicionMult:           4,
	SuspicionMaxTimeoutMult: 2,
}

// DeadAfter is the shortest silence after which the other members may
// declare a member dead: the minimum suspicion timeout, SuspicionMult ×
// ProbeInterval (1.6 s with LANFast; memberlist scales it by log10(N) above
// 10 members, and a probe has to fail first, so the real figure is longer).
// A node that stood still for longer (SIGSTOP, a VM pause) must assume its
// tenants were taken over meanwhile.
func (t Timing) DeadAfter() time.Duration {
	t = t.withDefaults()
	return time.Duration(t.SuspicionMult) * t.ProbeInterval
}

// withDefaults fills zero fields from LANFast.
func (t Timing) withDefaults() Timing {
	d := LANFast
	if t.ProbeInterval == 0 {
		t.ProbeInterval = d.ProbeInterval
	}
	if t.ProbeTimeout == 0 {
		t.ProbeTimeout = d.ProbeTimeout
	}
	if t.GossipInterval == 0 {
		t.GossipInterval = d.GossipInterval
	}
	if t.PushPullInterval == 0 {
		t.PushPullInterval = d.PushPullInterval
	}
	if t.DeadNodeReclaimTime == 0 {
		t.DeadNodeReclaimTime = d.DeadNodeReclaimTime
	}
	if t.RejoinInterval == 0 {
		t.RejoinInterval = d.RejoinInterval
	}
	if t.SuspicionMult == 0 {
		t.SuspicionMult = d.SuspicionMult
	}
	if t.SuspicionMaxTimeoutMult == 0 {
		t.SuspicionMaxTimeoutMult = d.SuspicionMaxTimeoutMult
	}
	return t
}

func (t Timing) validate() error {
	switch {
	case t.ProbeInterval < 0, t.ProbeTimeout < 0, t.GossipInterval < 0,
		t.PushPullInterval < 0, t.DeadNodeReclaimTime < 0, t.RejoinInterval < 0:
		return errors.New("gossip: Timing durations must not be negative")
	case t.ProbeTimeout >= t.ProbeInterval:
		return errors.New("gossip: Timing.ProbeTimeout must be shorter than ProbeInterval")
	case t.SuspicionMult < 1, t.SuspicionMaxTimeoutMult < 1:
		return errors.New("gossip: Timing suspicion multipliers must be >= 1")
	}
	return nil
}

// apply copies the timing into a memberlist configuration.
func (t Timing) apply(c *memberlist.Config) {
	c.ProbeInterval = t.ProbeInterval
	c.ProbeTimeout = t.ProbeTimeout
	c.GossipInterval = t.GossipInterval
	c.PushPullInterval = t.PushPullInterval
	c.DeadNodeReclaimTime = t.DeadNodeReclaimTime
	c.SuspicionMult = t.SuspicionMult
	c.SuspicionMaxTimeoutMult = t.SuspicionMaxTimeoutMult
	c.TCPTimeout = t.tcpTimeout()
}

// tcpTimeout bounds push/pull and join exchanges. The LAN default (10 s)
// would also bound how long Leave/Shutdown wait for an in-flight rejoin
// towards a black-holed seed; 10 x ProbeTimeout (2 s for LANFast) is ample
// for a full state exchange on a LAN.
func (t Timing) tcpTimeout() time.Duration {
	return min(max(10*t.ProbeTimeout, time.Second), 10*time.Second)
}

// fastRejoin is the rejoin period while a seed reports a stale view of us.
func (t Timing) fastRejoin() time.Duration {
	return min(t.ProbeInterval, t.RejoinInterval)
}

// updateTimeout bounds SetState's wait for its broadcast to go out.
func (t Timing) updateTimeout() time.Duration {
	return max(time.Second, 10*t.GossipInterval)
}
