package fallback

import (
	"time"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/away"
	"github.com/ringgate/ringgate/router/internal/cluster"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// Limiter returns the tenant's strict local limiter, set to its share
// of each limit (limit / live members, rounded down), and whether anything
// fits at all: a limit smaller than the member count leaves this node a share
// of zero, and admitting even one would risk the promise.
func (e *Edge) Limiter(t *tenant.Tenant, v *cluster.Lookup, owner string) (*limiter.Tenant, bool) {
	n := int64(1)
	if v != nil {
		n = int64(v.LiveMembers())
	}
	l, open := away.ShareOf(t.Limits, n)
	fl := t.Core().Fb.Share()
	if open {
		// The owner keeps to what this share leaves it (away.Unreachables);
		// a closed share admits nothing and leaves it all.
		e.noteFallback(t, owner)
		// Never store a -1 share: the limiter reads <= 0 as "no limit".
		fl.SetLimits(l)
	}
	if !t.Falling() {
		// The first request of an episode seeds the share with the owner's
		// recent usage; the others wait for it rather than admit blind.
		t.Core().FallbackMu.Lock()
		if !t.Falling() {
			seeded := e.seedShare(t, n, owner)
			c := t.Core()
			again := c.Fb.SetOwner(owner)
			// An owner that answers now and then restarts the episode
			// at each failure: its restarts are logged once a second.
			log, muted := true, int64(0)
			if again {
				log, muted = c.FbStartLog.Allow(e.cfg.Clock(), logEvery)
			} else {
				c.FbStartLog.Last.Store(e.cfg.Clock())
				c.FbStartLog.Mute.Store(0)
			}
			c.FbLogged.Store(log) // read by the episode's end (End)
			t.Core().InFallback.Store(true)
			e.cfg.Metrics.FallbackEpisodes.Inc()
			if log {
				e.cfg.Log.Warn("fallback", "phase", "start", "tenant", t.Name, "owner", owner, "members", n,
					"share_rpm", l.Requests, "share_tpm", l.Tokens, "share_concurrency", l.Concurrency, "seeded", seeded,
					"restarts_not_logged", muted)
			}
		}
		t.Core().FallbackMu.Unlock()
	}
	return fl, open
}

// seedShare charges the tenant's fallback share with its share (1/n) of
// what the unreachable owner had admitted: its last snapshot and the time
// since at the peak rate, or else what its last answers relayed here
// reported (seedFromAnswers). Each of the n-1 other nodes doing the same
// keeps their admissions plus the owner's within the limit, instead of
// adding n-1 fresh shares to whatever the owner had admitted before it
// went silent. It says which account it used.
//
// A node that abandoned a spill within the window (spillover.Loop.Abandon) uses
// neither: other nodes may have gone on admitting on the spill's budget,
// which does not count this node's share, and no snapshot holds what they
// admit. Its share starts spent.
//
// The seed is made on a scratch share and then swapped into the real one
// for the seed of the episode before if that was about the same owner
// (limiter.Replace): an owner that answers now and then restarts the
// episode at each failure, and the seeds of the restarts describe the same
// usage, which piled up would spend the share for a window.
func (e *Edge) seedShare(t *tenant.Tenant, n int64, owner string) string {
	c := t.Core()
	now := e.cfg.Clock()
	fl := c.Fb.Share()
	scratch := limiter.NewTenant(fl.Limits(), fl.Window(), c.Fb.SlotTTL())
	how := ""
	abandoned := c.Spill.AbandonedAt.Load() > now-int64(c.Lim.Window())
	if seed := e.seed.Load(); seed != nil && !abandoned {
		if st, ok := (*seed)(t.Name); ok {
			// The gap is charged again up to now even when the snapshot
			// is the one the last episode used: an owner that answered
			// in between admitted on the connections that reached it,
			// and no newer snapshot says what (it may be unable to write
			// one, or be closing).
			share := st.Share(n)
			scratch.Replace(now, limiter.State{}, share)
			scratch.ChargeGap(now, share)
			how = "redis_snapshot"
		}
	}
	if how == "" {
		how = e.seedFromAnswers(scratch, t, n, abandoned)
	}
	seed := scratch.Export(now)
	last := c.Fb.SwapSeed(owner, seed)
	fl.Replace(now, last, seed)
	return how
}

// seedFromAnswers charges the tenant's fallback share with its share (1/n)
// of the owner's usage as last seen in its answers (away.Seen.Seed); the
// answers are no account of it from before this node left a spill (what
// every node admitted on the spill is only in Redis's window of the
// budget, which is what did not answer), or when told so (blind).
func (e *Edge) seedFromAnswers(share *limiter.Tenant, t *tenant.Tenant, n int64, blind bool) string {
	c := t.Core()
	return c.Seen.Seed(share, e.cfg.Clock(), c.Lim.Window(), n, t.Limits, func(at int64) bool {
		return blind || t.AnswersMissSpill(e.cfg.Self, at)
	})
}

// logEvery bounds the start lines of a tenant's fallback episodes that
// restart for the same owner.
const logEvery = time.Second

// End logs the end of a tenant's fallback episode, once, and ends its
// levels' (package levels): the owner that answers for the tenant owns
// them too, and a level's episode left open would not be seeded afresh
// when the owner next goes silent.
func (e *Edge) End(t *tenant.Tenant, owner string) {
	if t.Falling() && t.Core().InFallback.CompareAndSwap(true, false) {
		if t.Core().FbLogged.Load() {
			e.cfg.Log.Info("fallback", "phase", "end", "tenant", t.Name, "owner", owner)
		}
		t.Core().FbQueue.Kick() // those waiting on the share go to the owner
		e.Report(t)
	}
	if t.Team != nil {
		e.End(t.Team, owner)
	}
	for _, l := range t.Models {
		e.End(l, owner)
	}
}
