package spill

import (
	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/limiter"
)

// seed is a limiter state's requests and tokens as budget uses.
func seed(s limiter.State) []lease.Use {
	var uses []lease.Use
	add := func(b limiter.Bucket, tokens bool) {
		i := len(uses) - 1
		for i >= 0 && uses[i].Bucket > b.Index {
			i--
		}
		if i < 0 || uses[i].Bucket != b.Index {
			uses = append(uses, lease.Use{})
			copy(uses[i+2:], uses[i+1:])
			i++
			uses[i] = lease.Use{Bucket: b.Index}
		}
		if tokens {
			uses[i].Tokens += b.Value
		} else {
			uses[i].Requests += b.Value
		}
	}
	for _, b := range s.Requests.Buckets {
		add(b, false)
	}
	for _, b := range s.Tokens.Buckets {
		add(b, true)
	}
	return uses
}

// slotsOf counts the slots a state holds, this node's and other nodes'.
func slotsOf(s limiter.State) int64 {
	var n int64
	for _, b := range s.Slots.Buckets {
		n += b.Value
	}
	for _, a := range s.Away {
		for _, b := range a.Slots.Buckets {
			n += b.Value
		}
	}
	return n
}

// chargeMirror charges lim with the requests and tokens a spill's mirror
// holds, in their buckets.
func chargeMirror(lim, mirror *limiter.Tenant, now int64) {
	s := mirror.Export(now)
	by := make(map[int64]*limiter.Delta)
	at := func(b int64) *limiter.Delta {
		if by[b] == nil {
			by[b] = &limiter.Delta{Bucket: b}
		}
		return by[b]
	}
	for _, b := range s.Requests.Buckets {
		at(b.Index).Requests += b.Value
	}
	for _, b := range s.Tokens.Buckets {
		at(b.Index).Tokens += b.Value
	}
	for _, d := range by {
		lim.Apply(now, *d)
	}
}

// CarriedEnded brings into sp, a spill this node owns, what ds report of
// calls admitted outside it (a call carries its spill's epoch; these have
// another, or none): one a fallback share admitted and reported only after
// the seal is charged to the budget, its slot carried; the end of a carried
// call frees its slot, and what it settled above its reservation is
// charged.
func (n *Node) CarriedEnded(sp *Spill, ds []limiter.Delta) {
	now := n.now()
	for _, d := range ds {
		if d.Epoch == sp.Epoch && d.Epoch != 0 {
			continue
		}
		if d.Slots < 0 {
			sp.Budget.ReleaseCarried()
		}
		if a := (lease.Amount{Requests: max(0, d.Requests), Tokens: max(0, d.Tokens)}); a.Requests > 0 || a.Tokens > 0 {
			sp.Budget.Charge(now, lease.Use{Bucket: d.Bucket, Amount: a}, d.Slots > 0)
		}
	}
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }
