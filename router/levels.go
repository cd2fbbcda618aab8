package router

import (
	"bytes"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/admit"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
	"github.com/ringgate/ringgate/router/internal/away"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// A tenant's request counts on every level of limits that applies to it:
// the tenant's own, its limit on the request's model ([[tenants.model_limits]])
// and its team's ([[teams]]). Each level beyond the tenant is an entity of
// its own (package tenant) that hands over, snapshots, reports deltas and falls
// back exactly like a tenant; the ring pins all of a team's entities to the
// team (ring.Pins), so the node that owns a tenant owns every level of it
// and decides them all in RAM, with no extra hop. A request is charged on
// its tenant first, then on each level; a level that refuses takes back
// what the others charged, so it is charged on all of them or none.

// level is what a call holds of one level of its limits.
type level struct {
	e   *tenant.Tenant
	lim *limiter.Tenant // the level's owner limiter, or its fallback share
	tk  limiter.Ticket
	fb  *away.Entry // admitted on the fallback share: its ledger entry
	// d is what the level said of the call; shadow: the level is in
	// shadow mode and refused it, and it is served without a charge on it.
	d      limiter.Decision
	shadow bool
	// used is what the level's windows held once it admitted the call
	// (requests, tokens), for the edge that relays the answer.
	used [2]int64
	// away: the ring places the level on another node than the tenant
	// (the members do not agree on the pins yet: node/pins.go). It is not
	// decided here; the call is reported to the level's owner, which
	// counts it (tk is a tally, fb its ledger entry).
	away bool
}

// setLevels picks, for each level of c's limits, the limiter matching the
// tenant's (c.lim): the level's owner limiter on the owner, its fallback
// share on a node that serves the tenant on its share, or that owns the
// tenant but not the level. A spilled tenant's
// levels are not enforced on the spill (tenants with levels do not spill:
// spill.go). It reports false when a level's share is zero.
func (r *Router) setLevels(c *call) bool {
	c.nLevels = 0
	var buf [2]*tenant.Tenant
	for _, e := range c.t.Levels(c.req.Model, &buf) {
		lim := e.Core().Lim
		switch c.lim {
		case c.t.Core().Lim:
			if o := r.view.Load().owner(e.Name); o != "" && o != r.node {
				// Placed elsewhere until the members agree on the pins:
				// the change that put the tenant on this level is not in
				// force yet; its owner is told of the call.
				c.levels[c.nLevels] = level{e: e, away: true}
				c.nLevels++
				continue
			}
		case c.t.Core().Fb.Made():
			v := r.view.Load()
			var open bool
			if lim, open = r.fallbackLimiter(e, v, v.owner(e.Name)); !open {
				return false
			}
		default:
			continue
		}
		c.levels[c.nLevels] = level{e: e, lim: lim}
		c.nLevels++
	}
	return true
}

// awaitLevels waits, on the owner, while a level's state is being loaded
// (AwaitHandoff); false when the wait ran out.
func (c *call) awaitLevels() bool {
	for i := range c.nLevels {
		if l := &c.levels[i]; !l.away && l.lim == l.e.Core().Lim && !l.e.AwaitHandoff() {
			return false
		}
	}
	return true
}

// levelLine is where a request that level i of c's limits refused waits
// for the level's room, as its tenant's refusals wait in the tenant's line
// (LineFor): a model limit's own line on its owner, or on this node's
// fallback share of it for the node's own clients; nil: none (the request
// waits in its tenant's line). Waiting there, not in the tenant's line,
// it leaves the tenant's requests for other models free to go: at the
// head of the tenant's line it would hold them all up, and a batch request
// there, once its share's turn comes, every interactive one for as long as
// the model stays full. A team's refusals wait in the tenant's line: the
// team limits all of the tenant's requests, and a line shared by its
// tenants would let one tenant's large request, at its head, hold up
// another's small one that has room.
func (c *call) levelLine(i int) *queue.Queue {
	l := &c.levels[i]
	if l.away || l.lim == nil || l.e.Kind != tenant.KindModel {
		return nil
	}
	return l.e.LineFor(l.lim, c.hops)
}

// checkLevels is admitLevels' decision charging nothing: the first level
// that would refuse (c.refusedBy names it), or d (the tenant's) with the
// tightest headers.
func (r *Router) checkLevels(c *call, d limiter.Decision) limiter.Decision {
	now := r.clock()
	for i := range c.nLevels {
		l := &c.levels[i]
		if l.away {
			continue
		}
		ld := l.lim.Check(now, int64(c.res.Total))
		if !ld.Allowed && (ld.Moved || !l.e.Shadow) {
			c.refusedBy, c.refusedLevel = l.e.Label, i+1
			return ld
		}
		tighten(&d, &ld)
	}
	return d
}

// Take charges the call on each of its levels, once its tenant took it
// (or shadowed). A level that refuses takes back what the levels before it
// took; c.refusedBy and c.refusedLevel name it, and its d says why.
func (lr *levelsRoom) Take() admit.Verdict {
	c := (*call)(lr)
	if c.nLevels == 0 {
		return admit.Taken
	}
	r := c.r
	now := r.clock()
	for i := range c.nLevels {
		l := &c.levels[i]
		if l.away {
			l.tk = l.e.Core().Lim.Tally(now, int64(c.res.Total))
			continue
		}
		var tk limiter.Ticket
		tk, l.d = r.admitOn(l.lim, l.lim == l.e.Core().Lim, now, int64(c.res.Total))
		switch {
		case l.d.Allowed:
			l.tk, l.used = tk, usedOf(&l.d)
		case !l.d.Moved && l.e.Shadow:
			l.shadow = true
		default:
			lr.cancel(i)
			c.refusedBy, c.refusedLevel = l.e.Label, i+1
			if l.d.Moved {
				return admit.Moved
			}
			return admit.Refused
		}
	}
	return admit.Taken
}

// Cancel takes back what every level took.
func (lr *levelsRoom) Cancel() { lr.cancel((*call)(lr).nLevels) }

// cancel takes back what the first n levels took, and lets their lines
// try: what was taken back may have refused a waiting head.
func (lr *levelsRoom) cancel(n int) {
	c := (*call)(lr)
	for j := range n {
		if l := &c.levels[j]; !l.away {
			c.r.cancelOn(l.e, l.lim, &l.tk)
		}
		c.levels[j].shadow = false
	}
	for j := range n {
		if q := c.levelLine(j); q != nil {
			q.Kick()
		}
	}
}

// headers is what the rate-limit headers of an admitted call say: its
// tenant's decision tightened by each level's. own is what its tenant had
// used (setLevelsUsed).
func (c *call) headers() (d limiter.Decision, own [2]int64) {
	d, own = c.d, usedOf(&c.d)
	for i := range c.nLevels {
		if l := &c.levels[i]; !l.away {
			tighten(&d, &l.d)
		}
	}
	return d, own
}

// cancelOn takes back what lim (e's owner limiter, or a share) charged for
// tk; if e was handed over since, its new owner is told.
func (r *Router) cancelOn(e *tenant.Tenant, lim *limiter.Tenant, tk *limiter.Ticket) {
	if d, handed := lim.CancelOrHand(r.clock(), tk); handed && lim == e.Core().Lim {
		r.reportDelta(e, d)
	}
}

// levelsShadowed marks, counts and logs the refusals of c's levels in
// shadow mode, for a call that is served.
func (r *Router) levelsShadowed(ctx *fasthttp.RequestCtx, c *call) {
	for i := range c.nLevels {
		if l := &c.levels[i]; l.shadow {
			// Counted and marked; the rate-limit headers keep reporting
			// the limits that are enforced.
			l.e.Counters().Refused(l.d.Limited)
			r.shadowRefusal(ctx, l.e.Name, &l.e.ShadowLog, l.d.Limited, l.d.RetryAfter)
		}
	}
}

// levelsAdmitted records the fallback-share admissions of c's levels in
// their ledgers, like the tenant's (fallbackAdmitted).
func (r *Router) levelsAdmitted(c *call) {
	for i := range c.nLevels {
		if l := &c.levels[i]; l.away || l.lim == l.e.Core().Fb.Made() && !l.shadow {
			l.fb = r.fallbackAdmitted(l.e, &l.tk, 0)
		}
	}
}

// finishLevels settles and frees what c holds of its levels, as finish
// does for its tenant, and lets the lines of the level's tenants try.
func (r *Router) finishLevels(c *call, actual int64) {
	var st *tenant.State
	for i := range c.nLevels {
		l := &c.levels[i]
		if l.shadow {
			continue
		}
		members := l.e.Members
		if st == nil {
			st = r.state.Load()
		}
		if e := st.ByName[l.e.Name]; e != nil && e != l.e {
			members = e.Members // reloaded since: its tenants now
		}
		if l.away {
			if l.fb != nil {
				r.fallbackFinished(l.e, l.fb, limiter.SettleDelta(&l.tk, actual))
			}
			continue
		}
		if l.lim == l.e.Core().Lim {
			if d, handed := l.lim.FinishOrHand(r.clock(), &l.tk, actual); handed {
				r.reportDelta(l.e, d)
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
		l.lim.Finish(r.clock(), &l.tk, actual)
		if l.fb != nil {
			r.fallbackFinished(l.e, l.fb, d)
		}
		l.e.Core().FbQueue.Kick()
		for _, m := range members {
			if c := m.Peek(); c != nil {
				c.FbQueue.Kick()
			}
		}
	}
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

// levelsUsedHeader carries, on an owner's answer to a hop for a tenant with
// levels, what the tenant and each level had used once the call was
// admitted: "<name>=<requests>,<tokens>;…". The edge keeps it to seed its
// fallback shares (noteOwnerUsage), and never passes it to the client.
const levelsUsedHeader = "x-ringgate-levels-used"

func usedOf(d *limiter.Decision) [2]int64 {
	var u [2]int64
	if d.LimitRequests > 0 {
		u[0] = max(0, d.LimitRequests-d.RemainingRequests)
	}
	if d.LimitTokens > 0 {
		u[1] = max(0, d.LimitTokens-d.RemainingTokens)
	}
	return u
}

// setLevelsUsed writes levelsUsedHeader on a hop's answer: own is what the
// tenant had used (its own decision, before tighten).
func setLevelsUsed(h *fasthttp.ResponseHeader, c *call, own [2]int64) {
	var buf [256]byte // SetBytesV copies: no allocation for a usual line
	b := buf[:0]
	add := func(name string, u [2]int64) {
		if len(b) > 0 {
			b = append(b, ';')
		}
		b = append(b, name...)
		b = append(b, '=')
		b = strconv.AppendInt(b, u[0], 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, u[1], 10)
	}
	add(c.t.Name, own)
	for i := range c.nLevels {
		if l := &c.levels[i]; !l.away && !l.shadow && l.lim == l.e.Core().Lim {
			add(l.e.Name, l.used)
		}
	}
	h.SetBytesV(levelsUsedHeader, b)
}

// noteLevelsUsed records, for t and its levels, what the owner's answer
// says they used (levelsUsedHeader); an answer without it changes nothing.
func (r *Router) noteLevelsUsed(t *tenant.Tenant, v []byte) {
	now := r.clock()
	for len(v) > 0 {
		var part []byte
		part, v, _ = bytes.Cut(v, []byte{';'})
		name, nums, ok := bytes.Cut(part, []byte{'='})
		if !ok {
			return
		}
		rq, tk, ok := bytes.Cut(nums, []byte{','})
		if !ok {
			return
		}
		requests, err1 := strconv.ParseInt(string(rq), 10, 64)
		tokens, err2 := strconv.ParseInt(string(tk), 10, 64)
		if err1 != nil || err2 != nil {
			return
		}
		var e *tenant.Tenant
		switch {
		case string(name) == t.Name:
			e = t
		case t.Team != nil && string(name) == t.Team.Name:
			e = t.Team
		default:
			for _, m := range t.Models {
				if string(name) == m.Name {
					e = m
				}
			}
		}
		if e != nil {
			e.Core().Seen.Note(now, requests, tokens)
		}
	}
}
