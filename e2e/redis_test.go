//go:build e2e

package e2e

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/internal/redistest"
)

// TestHAProxyScaleUpAndDrainWithRedis is TestHAProxyScaleUpAndDrain with the
// nodes handing tenants over through Redis snapshots. On top of what that
// test checks, no tenant may get more than its limit (+2 %, rounded down)
// through to the provider in any sliding window of the whole run, the
// scale-up's and the drain's moments included, and the new owners' rebalance
// logs must say that the moved tenants' state arrived as the previous owner's
// final snapshot.
func TestHAProxyScaleUpAndDrainWithRedis(t *testing.T) {
	needTool(t, "redis-server", "/usr/bin/redis-server", "/usr/local/bin/redis-server")
	srv := redistest.Start(t) // stopped after the nodes: its cleanup was registered first
	out := runScaleUpAndDrain(t, scenario{
		name:             "with Redis",
		redis:            srv.Addr(),
		snapshotInterval: 300 * time.Millisecond,
		handoffWait:      100 * time.Millisecond,
		// redis.timeout: the default, 15ms.
	})
	compare.add(t, out)

	// The whole run, ring changes included, with the same allowance for
	// the jitter between admission and the provider's receive time.
	bound := rpm + rpm*2/100
	for _, name := range tenantNames {
		m := out.wholeSlack[name]
		if m.Count > bound {
			t.Errorf("tenant %s: %d requests reached the provider within %s from %s (whole run, Redis handoff); at most %d allowed (limit %d per %s + 2%%)",
				name, m.Count, window-measureSlack, out.rel(m.First), bound, rpm, window)
			diagnose(t, out, name, m.First, window-measureSlack)
		}
	}

	checkHandoffs(t, out)
	for node, m := range out.metrics {
		if m["save_failures"] > 0 || m["load_failures"] > 0 || m["skipped"] > 0 || m["decode_errors"] > 0 {
			t.Logf("note: %s's Redis calls failed or were skipped at times: %v", node, m)
		}
	}
}

// checkHandoffs checks the scale-up's and the drain's rebalance logs: some
// node took tenants over in each, every tenant taken over came as a final
// Redis snapshot, as many as the previous owners handed over, and no final
// snapshot failed to be written.
func checkHandoffs(t *testing.T, out *outcome) {
	t.Helper()
	changes := []struct {
		name     string
		from, to time.Time
	}{
		{"scale-up", out.ev.upStart, out.ev.drainStart},
		{"drain", out.ev.drainStart, out.loadStart.Add(time.Hour)},
	}
	for _, ch := range changes {
		if ch.from.IsZero() {
			continue // the event failed, reported already
		}
		var handed, taken, final int
		var lines []string
		for _, n := range out.nodes {
			for _, r := range out.rebalances[n.name] {
				if r.Time.Before(ch.from) || !r.Time.Before(ch.to) {
					continue
				}
				if r.FlushError != "" {
					t.Errorf("%s: %s could not write its final snapshots at %s: %s", ch.name, n.name, out.rel(r.Time), r.FlushError)
				}
				handed += r.HandedOver
				if r.TakenOver == 0 {
					continue
				}
				taken += r.TakenOver
				// A planned change hands state over peer to peer; a
				// final snapshot is the fallback if the peer could not
				// be asked.
				exact := r.State["peer"] + r.State["redis_snapshot"]
				final += exact
				lines = append(lines, fmt.Sprintf("%s at %s took over %d (moved %v): state %v, handoff %d ms",
					n.name, out.rel(r.Time), r.TakenOver, r.MovedTenants, r.State, r.HandoffMS))
				if exact != r.TakenOver {
					t.Errorf("%s: %s took over %d tenants at %s but only %d came from the previous owner or its final snapshot (state %v)",
						ch.name, n.name, r.TakenOver, out.rel(r.Time), exact, r.State)
				}
			}
		}
		t.Logf("%s handoffs: handed over %d, taken over %d, %d from the previous owner or its final snapshot:\n%s",
			ch.name, handed, taken, final, strings.Join(lines, "\n"))
		if taken == 0 {
			t.Errorf(`%s: no node's "msg":"rebalance" line took a tenant over`, ch.name)
		}
		if handed != taken {
			t.Errorf("%s: previous owners handed over %d tenants, new owners took over %d", ch.name, handed, taken)
		}
	}
}

// diagnose logs, for a window of one tenant that held too much, which node
// admitted each request in it (from the answers matched with the provider's
// records) and the rebalances around it.
func diagnose(t *testing.T, out *outcome, tenant string, from time.Time, w time.Duration) {
	t.Helper()
	to := from.Add(w)
	out.ld.mu.Lock()
	defer out.ld.mu.Unlock()
	perNode := map[string]int{}
	var lines []string
	for _, r := range out.recs {
		if r.tenant() != tenant || r.Received.Before(from) || !r.Received.Before(to) {
			continue
		}
		a, ok := out.ld.answered[r.User]
		node := a.node
		if !ok {
			node = "(no answer)"
		}
		perNode[node]++
		lines = append(lines, fmt.Sprintf("  %s received %s by %s (client: sent %s, answered %s, HTTP %d)",
			r.User, out.rel(r.Received), node, out.rel(a.sent), out.rel(a.done), a.status))
	}
	slices.Sort(lines)
	t.Logf("tenant %s, window %s..%s: %d requests, per admitting node %v:\n%s",
		tenant, out.rel(from), out.rel(to), len(lines), perNode, strings.Join(lines, "\n"))
	for _, n := range out.nodes {
		for _, r := range out.rebalances[n.name] {
			if !r.Time.Before(from.Add(-window)) && r.Time.Before(to.Add(window)) && slices.Contains(r.MovedTenants, tenant) {
				t.Logf("  rebalance %s at %s: members %v moved %v, handed over %d, took over %d, state %v, handoff %d ms%s",
					n.name, out.rel(r.Time), r.Members, r.MovedTenants, r.HandedOver, r.TakenOver, r.State, r.HandoffMS, r.flushNote())
			}
		}
	}
}

// compare collects each scenario's outcome and, once both ran, logs the
// whole-run figures side by side.
var compare comparison

type comparison struct {
	mu   sync.Mutex
	runs map[string]*outcome
}

func (c *comparison) add(t *testing.T, o *outcome) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil {
		c.runs = map[string]*outcome{}
	}
	c.runs[o.sc.name] = o
	if len(c.runs) < 2 {
		return
	}
	names := slices.Sorted(maps.Keys(c.runs))
	slices.Reverse(names) // "without Redis", "with Redis"
	var b strings.Builder
	fmt.Fprintf(&b, "most requests of a tenant in any sliding window over the whole run (limit %d per %s), "+
		"and the shortest span of %d consecutive ones:\n", rpm, window, rpm+1)
	fmt.Fprintf(&b, "%-9s", "tenant")
	for _, n := range names {
		fmt.Fprintf(&b, " | %-22s", n+" ("+window.String()+")")
		fmt.Fprintf(&b, " | %-22s", n+" ("+(window-measureSlack).String()+")")
		fmt.Fprintf(&b, " | %-8s", fmt.Sprintf("%d within", rpm+1))
	}
	b.WriteString("\n")
	for _, tenant := range tenantNames {
		fmt.Fprintf(&b, "%-9s", tenant)
		for _, n := range names {
			o := c.runs[n]
			fmt.Fprintf(&b, " | %-22s", fmt.Sprintf("%d/%d at %s", o.whole[tenant].Count, rpm, o.rel(o.whole[tenant].First)))
			fmt.Fprintf(&b, " | %-22s", fmt.Sprintf("%d/%d at %s", o.wholeSlack[tenant].Count, rpm, o.rel(o.wholeSlack[tenant].First)))
			fmt.Fprintf(&b, " | %-8s", o.closest[tenant].Round(time.Millisecond))
		}
		b.WriteString("\n")
	}
	t.Log(b.String())
}
