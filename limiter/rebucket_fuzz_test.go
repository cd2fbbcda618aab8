package limiter

import (
	"fmt"
	"math/rand"
	"testing"
	"time"
)

// rebucketCall is a call admitted in fuzzRebucket, as an auditor sees it.
type rebucketCall struct {
	node     int
	tk       Ticket
	at       int64
	reserved int64
	tokens   int64 // final (credit only)
	end      int64
	cancel   bool
	done     bool
}

// Randomised, with reloads: Rebucket to random windows and slot TTLs on
// every node (a reload reaches all nodes at the same instant), handoffs
// between nodes, settles (credits), finishes, cancels, releases.
// Over-admission is audited with the shortest window and TTL ever in
// force; a refusal must be justified within the longest ones (plus slack).
func TestRebucketFuzz(t *testing.T) {
	for seed := int64(1); seed <= 500; seed++ {
		fuzzRebucket(t, seed)
		if t.Failed() {
			return
		}
	}
}

func fuzzRebucket(t *testing.T, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	windows := []time.Duration{time.Second, 1500 * time.Millisecond, 2 * time.Second, 5 * time.Second, 640 * time.Millisecond}
	ttls := []time.Duration{2 * time.Second, 3 * time.Second, 7 * time.Second, 1280 * time.Millisecond}
	window := windows[rng.Intn(len(windows))]
	ttl := ttls[rng.Intn(len(ttls))]
	minW, maxW, minT, maxT := window, window, ttl, ttl
	l := Limits{Requests: int64(1 + rng.Intn(8)), Tokens: int64(100 + rng.Intn(500)), Concurrency: int64(1 + rng.Intn(4))}
	if rng.Intn(3) == 0 {
		l.Tokens = 0
	}
	names := []string{"n0", "n1", "n2"}
	nodes := make([]*Tenant, 3)
	for i := range nodes {
		nodes[i] = NewTenant(l, window, ttl)
	}
	owner := 0
	multi := rng.Intn(2) == 0
	for i := 1; i < 3; i++ {
		nodes[i].Freeze(t0, names[owner])
	}
	now := t0
	rebuckets := 0
	var calls []*rebucketCall
	var log []string
	fail := func(f string, a ...any) {
		t.Helper()
		n := len(log)
		t.Fatalf("seed %d (limits %+v): %s\nlast ops:\n%v", seed, l, fmt.Sprintf(f, a...), log[max(0, n-30):])
	}
	for step := 0; step < 500; step++ {
		w := int64(window) / Buckets
		sw := int64(ttl) / Buckets
		switch r := rng.Intn(10); {
		case r < 4:
			now += rng.Int63n(3 * w)
		case r < 5:
			now = (now/w + 1) * w
		case r < 6:
			now = (now/sw + 1) * sw
		case r < 7:
			now += rng.Int63n(int64(2 * max(window, ttl)))
		}
		switch op := rng.Intn(24); {
		case op < 10:
			cost := int64(0)
			if l.Tokens > 0 {
				cost = 1 + rng.Int63n(l.Tokens/3)
			}
			tk, d := nodes[owner].Admit(now, cost)
			log = append(log, fmt.Sprintf("%d admit@n%d %d: %v %v", now-t0, owner, cost, d.Allowed, d.Limited))
			var reqs, reqsLong, toks, toksLong, running, runningLong int64
			slack := 4 * int64(maxW) / Buckets
			for _, c := range calls {
				if c.cancel {
					continue
				}
				if c.at > now-int64(minW) {
					reqs++
					toks += c.tokens
				}
				if c.at > now-int64(maxW)-slack {
					reqsLong++
					if c.done {
						toksLong += c.tokens
					} else {
						toksLong += c.reserved
					}
				}
				end := c.end
				if end == 0 || end > c.at+int64(minT) {
					end = c.at + int64(minT)
				}
				if now < end {
					running++
				}
				end = c.end
				if end == 0 || end > c.at+int64(maxT)+4*int64(maxT)/Buckets {
					end = c.at + int64(maxT) + 4*int64(maxT)/Buckets
				}
				if now < end {
					runningLong++
				}
			}
			if d.Allowed {
				if reqs+1 > l.Requests {
					fail("admitted %d requests within %v, limit %d", reqs+1, minW, l.Requests)
				}
				if l.Tokens > 0 && toks+cost > l.Tokens {
					fail("admitted %d tokens within %v, limit %d", toks+cost, minW, l.Tokens)
				}
				if running+1 > l.Concurrency {
					fail("admitted with %d running, limit %d", running, l.Concurrency)
				}
				calls = append(calls, &rebucketCall{node: owner, tk: tk, at: now, reserved: cost, tokens: cost})
			} else if !d.Moved {
				switch d.Limited {
				case Requests:
					if reqsLong < l.Requests {
						fail("refused on requests with %d in the longest window+slack, limit %d", reqsLong, l.Requests)
					}
				case Tokens:
					if toksLong+cost <= l.Tokens {
						fail("refused %d tokens with %d in the longest window+slack, limit %d", cost, toksLong, l.Tokens)
					}
				case Concurrency:
					if runningLong < l.Concurrency {
						info := ""
						for _, c := range calls {
							info += fmt.Sprintf(" [at %d end %d gen %d rel %v]", c.at-t0, c.end-t0, c.tk.gen, c.tk.released)
						}
						fail("refused on concurrency with %d held at most, limit %d; gen %d; calls%s; slots %+v", runningLong, l.Concurrency, nodes[owner].history.gen, info, nodes[owner].Export(now).Slots)
					}
				}
			}
		case op < 15:
			var open []*rebucketCall
			for _, c := range calls {
				if !c.done {
					open = append(open, c)
				}
			}
			if len(open) == 0 {
				continue
			}
			c := open[rng.Intn(len(open))]
			tn := nodes[c.node]
			var d Delta
			var handed bool
			kind := rng.Intn(5)
			actual := c.tokens - rng.Int63n(c.tokens/2+1)
			switch kind {
			case 0:
				d, handed = tn.CancelOrHand(now, &c.tk)
				c.cancel = true
				c.done, c.end = true, now
			case 1:
				// settle only (not done); on a frozen node Settle applies
				// to its frozen windows: only on the owner.
				if c.node != owner {
					continue
				}
				tn.Settle(now, &c.tk, actual)
				c.tokens = actual
			default:
				d, handed = tn.FinishOrHand(now, &c.tk, actual)
				c.tokens = actual
				c.done, c.end = true, now
			}
			log = append(log, fmt.Sprintf("%d end(kind %d) n%d call@%d actual %d (owner n%d) handed=%v %+v", now-t0, kind, c.node, c.at-t0, actual, owner, handed, d))
			if handed {
				nodes[owner].ApplyFrom(now, names[c.node], d)
			}
		case op < 18 && multi:
			to := rng.Intn(3)
			if to == owner {
				continue
			}
			st := nodes[owner].Freeze(now, names[to])
			st.Holder = names[owner]
			nodes[to].Import(now, st.As(names[to]))
			log = append(log, fmt.Sprintf("%d handoff n%d->n%d", now-t0, owner, to))
			owner = to
		case op < 20 && rebuckets < maxRebuckets-2: // beyond the history: documented
			rebuckets++
			window = windows[rng.Intn(len(windows))]
			ttl = ttls[rng.Intn(len(ttls))]
			minW, maxW, minT, maxT = min(minW, window), max(maxW, window), min(minT, ttl), max(maxT, ttl)
			for _, n := range nodes {
				n.Rebucket(now, window, ttl)
			}
			log = append(log, fmt.Sprintf("%d rebucket %v %v", now-t0, window, ttl))
		}
	}
}
