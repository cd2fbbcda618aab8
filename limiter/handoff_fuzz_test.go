package limiter

import (
	"fmt"
	"math/rand"
	"testing"
	"time"
)

// handoffCall is a call admitted in fuzzHandoff, as an auditor sees it.
type handoffCall struct {
	node   int
	tk     Ticket
	at     int64
	end    int64 // when its slot ends (release) or 0 while running
	cancel bool
	done   bool
}

// Randomised: three nodes hand a tenant around (Freeze / Import, deltas of
// calls finishing on a frozen node applied by the owner), with finishes and
// cancels, time in tiny steps, on bucket boundaries and in big jumps.
// Audited: no trailing window of requests over the limit; no more slots
// than allowed at an admission; no refusal while the trailing window+bucket
// holds room (requests) or fewer calls run than the limit (slots). With
// skewed clocks each node's clock is off by up to the skew either way, and
// the audit allows what two clocks that far apart can make of a window: a
// charge counts for the window less their difference, at least. The skewed
// run found a release lost at a bucket boundary between two clocks (seed 2
// of 5 ms: a refusal at concurrency 1 with no call running), clock.go.
func TestHandoffFuzz(t *testing.T) {
	for _, skew := range []time.Duration{0, 5 * time.Millisecond} {
		t.Run(fmt.Sprintf("clocks off by up to %v", skew), func(t *testing.T) {
			for seed := int64(1); seed <= 500; seed++ {
				fuzzHandoff(t, seed, int64(skew))
				if t.Failed() {
					return
				}
			}
		})
	}
}

func fuzzHandoff(t *testing.T, seed, skew int64) {
	rng := rand.New(rand.NewSource(seed))
	window := time.Duration(1+rng.Intn(4)) * time.Second
	ttl := time.Duration(2+rng.Intn(6)) * time.Second
	l := Limits{Requests: int64(1 + rng.Intn(8)), Tokens: 0, Concurrency: int64(1 + rng.Intn(4))}
	names := []string{"n0", "n1", "n2"}
	nodes := make([]*Tenant, 3)
	for i := range nodes {
		nodes[i] = NewTenant(l, window, ttl)
	}
	now := t0
	offset := make([]int64, len(nodes)) // each node's clock is now+offset
	if skew > 0 {
		for i := range offset {
			offset[i] = rng.Int63n(2*skew+1) - skew
		}
	}
	clock := func(node int) int64 { return now + offset[node] }
	owner := 0
	for i := 1; i < 3; i++ {
		nodes[i].Freeze(clock(i), names[owner])
	}
	w := int64(window) / Buckets
	sw := int64(ttl) / Buckets
	apart := 2 * skew // the most two clocks differ
	var calls []*handoffCall
	var log []string
	fail := func(f string, a ...any) {
		t.Helper()
		n := len(log)
		t.Fatalf("seed %d: %s\nlast ops:\n%v", seed, fmt.Sprintf(f, a...), log[max(0, n-25):])
	}
	finish := func(c *handoffCall, cancel bool) {
		tn := nodes[c.node]
		var d Delta
		var handed bool
		if cancel {
			d, handed = tn.CancelOrHand(clock(c.node), &c.tk)
			c.cancel = true
		} else {
			d, handed = tn.FinishOrHand(clock(c.node), &c.tk, 0)
		}
		c.done, c.end = true, now
		if handed {
			if c.node == owner {
				fail("owner handed a delta")
			}
			nodes[owner].ApplyFrom(clock(owner), names[c.node], d)
		}
	}
	for step := 0; step < 600; step++ {
		switch r := rng.Intn(10); {
		case r < 4:
			now += rng.Int63n(3 * w)
		case r < 5:
			now = (now/w + 1) * w // a request bucket boundary
		case r < 6:
			now = (now/sw + 1) * sw // a slot bucket boundary
		case r < 7:
			now += rng.Int63n(int64(2 * max(window, ttl)))
		}
		switch op := rng.Intn(20); {
		case op < 9:
			tk, d := nodes[owner].Admit(clock(owner), 0)
			log = append(log, fmt.Sprintf("%d admit@n%d %v", now-t0, owner, d.Allowed))
			// Audit requests in (now-window, now] and slots held.
			var reqs, reqsLong, running int64
			for _, c := range calls {
				if c.cancel {
					continue
				}
				if c.at > now-int64(window)+apart {
					reqs++
				}
				if c.at > now-int64(window)-2*w-apart {
					reqsLong++
				}
				end := c.end
				if end == 0 || end > c.at+int64(ttl) {
					end = c.at + int64(ttl)
				}
				if now < end-apart {
					running++
				}
			}
			var runningLong int64 // slots still counted at most (TTL+2 buckets)
			for _, c := range calls {
				if c.cancel {
					continue
				}
				end := c.end
				if end == 0 {
					end = c.at + int64(ttl) + 2*sw + apart
				}
				if now < end {
					runningLong++
				}
			}
			if d.Allowed {
				if reqs+1 > l.Requests {
					fail("admitted %d requests in a window, limit %d", reqs+1, l.Requests)
				}
				if running+1 > l.Concurrency {
					fail("admitted with %d running, limit %d", running, l.Concurrency)
				}
				calls = append(calls, &handoffCall{node: owner, tk: tk, at: now})
			} else if !d.Moved {
				switch d.Limited {
				case Requests:
					if reqsLong < l.Requests {
						fail("refused on requests with %d in the window+2 buckets, limit %d", reqsLong, l.Requests)
					}
				case Concurrency:
					if runningLong < l.Concurrency {
						fail("refused on concurrency with %d held at most, limit %d", runningLong, l.Concurrency)
					}
				}
			}
		case op < 13:
			var open []*handoffCall
			for _, c := range calls {
				if !c.done {
					open = append(open, c)
				}
			}
			if len(open) == 0 {
				continue
			}
			c := open[rng.Intn(len(open))]
			cancel := rng.Intn(4) == 0
			log = append(log, fmt.Sprintf("%d finish n%d call@%d cancel=%v (owner n%d)", now-t0, c.node, c.at-t0, cancel, owner))
			finish(c, cancel)
		case op < 15:
			to := rng.Intn(3)
			if to == owner {
				continue
			}
			st := nodes[owner].Freeze(clock(owner), names[to])
			st.Holder = names[owner]
			nodes[to].Import(clock(to), st.As(names[to]))
			log = append(log, fmt.Sprintf("%d handoff n%d->n%d %+v", now-t0, owner, to, st))
			owner = to
		}
	}
}
