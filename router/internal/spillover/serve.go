package spillover

import (
	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/router/internal/spill"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// Ended takes an owner's word m that t's spill ended: this node stops. It
// returns the arrivals to answer with, and whether what this node admitted
// reached the owner (if not, the owner must not take the answer as
// confirmed).
func (l *Loop) Ended(t *tenant.Tenant, m *spill.Msg) (arrivals int64, delivered bool) {
	cur := t.Spilled()
	delivered = true
	if cur != nil && cur.Owner == m.Owner && cur.Epoch == m.Epoch {
		arrivals = cur.Arrivals()
		delivered = l.leave(t, cur, "owner_ended")
	} else if c := t.Peek(); c != nil && !c.Fb.Delivered() {
		// Left already (abandoned, lapsed), and what it admitted on
		// the spill or its share since has not reached the owner: the
		// owner must not take this as confirmed.
		l.Ledger.Report(t)
		delivered = c.Fb.Delivered()
	}
	return arrivals, delivered
}

// Announced takes an owner's word m that t spills: this node joins the
// spill, or renews it, unless it must not serve it. It returns the
// arrivals to answer with, or why this node refuses, as a code and a
// message.
func (l *Loop) Announced(t *tenant.Tenant, m *spill.Msg) (arrivals int64, code, msg string) {
	cur := t.Spilled()
	if code, msg := l.Node.Refusal(m, cur, member{l: l, t: t}); code != "" {
		return 0, code, msg
	}
	if cur == nil || cur.Owner != m.Owner || cur.Epoch != m.Epoch {
		if cur != nil {
			l.leave(t, cur, "replaced")
		}
		// Under Reloads: a reload keeps the budgets of the spills it
		// sees, and must see this one.
		l.Reloads.Lock()
		sp, ok := l.Node.Join(*m, t.Core().Spill)
		l.Reloads.Unlock()
		if !ok {
			return 0, "busy", "Another spillover change is in progress."
		}
		cur = sp
	} else if cur.Budget.Stats(l.now()).Limits != m.Limits {
		cur.Budget.SetLimits(m.Limits, lease.Share) // the owner reloaded
	}
	return l.Node.Renew(cur), "", ""
}

// member is t as an owner's "on" finds it on this node.
type member struct {
	l *Loop
	t *tenant.Tenant
}

func (m member) RingOwner() string { return m.l.Cluster.Owners()(m.t.Name) }

func (m member) Holder() *spill.Holder { return m.t.Core().Spill }

func (m member) InFallback() bool { return m.t.Falling() || !m.t.Core().Fb.Delivered() }
