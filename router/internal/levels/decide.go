package levels

import (
	"sync/atomic"

	"github.com/ringgate/ringgate/admit"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// Line is where a request that level i refused waits for the level's
// room, as its tenant's refusals wait in the tenant's line (LineFor): a
// model limit's own line on its owner, or on this node's fallback share of
// it for the node's own clients (hops: the request's, 0 from a client);
// nil: none (the request waits in its tenant's line). Waiting there, not
// in the tenant's line, it leaves the tenant's requests for other models
// free to go: at the head of the tenant's line it would hold them all up,
// and a batch request there, once its share's turn comes, every
// interactive one for as long as the model stays full. A team's refusals
// wait in the tenant's line: the team limits all of the tenant's requests,
// and a line shared by its tenants would let one tenant's large request,
// at its head, hold up another's small one that has room.
func (s *Set) Line(i, hops int) *queue.Queue {
	l := &s.l[i]
	if l.away || l.lim == nil || l.e.Kind != tenant.KindModel {
		return nil
	}
	return l.e.LineFor(l.lim, hops)
}

// Check is Take's decision charging nothing, at now for cost: the first
// level that would refuse (its decision, and 1 + its index), or d (the
// tenant's) with the tightest headers, and 0.
func (s *Set) Check(now, cost int64, d limiter.Decision) (limiter.Decision, int) {
	for i := range s.n {
		l := &s.l[i]
		if l.away {
			continue
		}
		ld := l.lim.Check(now, cost)
		if !ld.Allowed && (ld.Moved || !l.e.Shadow) {
			return ld, i + 1
		}
		tighten(&d, &ld)
	}
	return d, 0
}

// Take charges the call on each of its levels, once its tenant took it
// (or shadowed). A level that refuses takes back what the levels before it
// took; refused is 1 + its index (0: none), and its Decision says why.
// hops are the call's (Line).
func (s *Set) Take(n Node, cost int64, hops int) (v admit.Verdict, refused int) {
	if s.n == 0 {
		return admit.Taken, 0 // inlined: a tenant without levels makes no call
	}
	return s.take(n, cost, hops)
}

func (s *Set) take(n Node, cost int64, hops int) (admit.Verdict, int) {
	now := n.Clock()
	for i := range s.n {
		l := &s.l[i]
		if l.away {
			l.tk = l.e.Core().Lim.Tally(now, cost)
			continue
		}
		// A refusal writes the zero Ticket to l.tk: what a level that
		// took nothing holds already (Choose starts it so, cancel spends
		// it).
		n.Admit(l.lim, l.lim == l.e.Core().Lim, now, cost, &l.tk, &l.d)
		switch {
		case l.d.Allowed:
			l.used = usedOf(&l.d)
		case !l.d.Moved && l.e.Shadow:
			l.shadow = true
		default:
			s.cancel(n, i, hops)
			if l.d.Moved {
				return admit.Moved, i + 1
			}
			return admit.Refused, i + 1
		}
	}
	return admit.Taken, 0
}

// Cancel takes back what every level took; hops are the call's (Line).
func (s *Set) Cancel(n Node, hops int) { s.cancel(n, s.n, hops) }

// cancel takes back what the first k levels took, and lets their lines
// try: what was taken back may have refused a waiting head.
func (s *Set) cancel(n Node, k, hops int) {
	for j := range k {
		if l := &s.l[j]; !l.away {
			CancelOn(n, l.e, l.lim, &l.tk)
		}
		s.l[j].shadow = false
	}
	for j := range k {
		if q := s.Line(j, hops); q != nil {
			q.Kick()
		}
	}
}

// CancelOn takes back what lim (e's owner limiter, or a share) charged for
// tk; if e was handed over since, its new owner is told.
func CancelOn(n Node, e *tenant.Tenant, lim *limiter.Tenant, tk *limiter.Ticket) {
	if d, handed := lim.CancelOrHand(n.Clock(), tk); handed && lim == e.Core().Lim {
		n.Report(e, d)
	}
}

// Headers is what the rate-limit headers of an admitted call say: its
// tenant's decision d tightened by each level's. own is what its tenant
// had used (AppendUsed).
func (s *Set) Headers(d *limiter.Decision) (out limiter.Decision, own [2]int64) {
	out, own = *d, usedOf(d)
	for i := range s.n {
		if l := &s.l[i]; !l.away {
			tighten(&out, &l.d)
		}
	}
	return out, own
}

// tighten makes d's rate-limit headers report the tightest of d's and
// o's: per dimension, the one with the fewest left.
func tighten(d, o *limiter.Decision) {
	if o.LimitRequests > 0 && (d.LimitRequests <= 0 || o.RemainingRequests < d.RemainingRequests) {
		d.LimitRequests, d.RemainingRequests, d.ResetRequests = o.LimitRequests, o.RemainingRequests, o.ResetRequests
	}
	if o.LimitTokens > 0 && (d.LimitTokens <= 0 || o.RemainingTokens < d.RemainingTokens) {
		d.LimitTokens, d.RemainingTokens, d.ResetTokens = o.LimitTokens, o.RemainingTokens, o.ResetTokens
	}
	if o.LimitConcurrency > 0 && (d.LimitConcurrency <= 0 || o.LimitConcurrency-o.InFlight < d.LimitConcurrency-d.InFlight) {
		d.LimitConcurrency, d.InFlight = o.LimitConcurrency, o.InFlight
	}
}

// Shadowed calls f with each level in shadow mode that refused the call,
// which is served: f marks, counts and logs the refusal.
func (s *Set) Shadowed(f func(e *tenant.Tenant, d *limiter.Decision)) {
	for i := range s.n {
		if l := &s.l[i]; l.shadow {
			f(l.e, &l.d)
		}
	}
}

// Admitted records the fallback-share admissions of the levels, and the
// calls counted away, in their ledgers, like the tenant's.
func (s *Set) Admitted(lg Ledger) {
	for i := range s.n {
		if l := &s.l[i]; l.away || l.lim == l.e.Core().Fb.Made() && !l.shadow {
			l.fb = lg.Admitted(l.e, &l.tk)
		}
	}
}

// Finish settles and frees what the call holds of its levels, as the
// router does for its tenant, and lets the lines of the level's tenants
// try. states holds the node's tenants in force: a level reloaded since
// the call was admitted has its tenants there.
func (s *Set) Finish(n Node, lg Ledger, states *atomic.Pointer[tenant.State], actual int64) {
	if s.n == 0 {
		return // no levels: not even the clock is read
	}
	now := n.Clock() // one reading for every level, as take makes
	var st *tenant.State
	for i := range s.n {
		l := &s.l[i]
		if l.shadow {
			continue
		}
		members := l.e.Members
		if st == nil {
			st = states.Load()
		}
		if e := st.ByName[l.e.Name]; e != nil && e != l.e {
			members = e.Members // reloaded since: its tenants now
		}
		if l.away {
			if l.fb != nil {
				lg.Finished(l.e, l.fb, limiter.SettleDelta(&l.tk, actual))
			}
			continue
		}
		if l.lim == l.e.Core().Lim {
			if d, handed := l.lim.FinishOrHand(now, &l.tk, actual); handed {
				n.Report(l.e, d)
			}
			l.e.Core().Queue.Kick() // those waiting for the level's room
			for _, m := range members {
				if c := m.Peek(); c != nil { // no core: no one waiting
					c.Queue.Kick()
				}
			}
			continue
		}
		var d limiter.Delta
		if l.fb != nil {
			d = limiter.FinishDelta(&l.tk, actual)
		}
		l.lim.Finish(now, &l.tk, actual)
		if l.fb != nil {
			lg.Finished(l.e, l.fb, d)
		}
		l.e.Core().FbQueue.Kick()
		for _, m := range members {
			if c := m.Peek(); c != nil {
				c.FbQueue.Kick()
			}
		}
	}
}
