package node

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/internal/redistest"
	"github.com/ringgate/ringgate/reserve"
)

// openStream starts a streamed chat completion for tenant via nd and returns
// the answer's status and a function that hangs up.
func (c *clCluster) openStream(nd *clNode, tenant string) (status int, hangUp func()) {
	ctx, cancel := context.WithTimeout(context.Background(), clReqTimeout)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+nd.Addr()+"/v1/chat/completions",
		strings.NewReader(string(clChatBody(tenant, true))))
	if err != nil {
		cancel()
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-"+tenant)
	resp, err := c.hc.Do(req)
	if err != nil {
		cancel()
		return 0, func() {}
	}
	return resp.StatusCode, func() { resp.Body.Close(); cancel() }
}

// allSlots reports whether conc streams of tenant are admitted at once via
// nd, with the answers' statuses, hanging up on them afterwards.
func (c *clCluster) allSlots(nd *clNode, tenant string, conc int) (bool, []int) {
	ok := true
	var statuses []int
	var hangUps []func()
	for range conc {
		st, h := c.openStream(nd, tenant)
		hangUps = append(hangUps, h)
		statuses = append(statuses, st)
		ok = ok && st == http.StatusOK
	}
	for _, h := range hangUps {
		h()
	}
	return ok, statuses
}

// TestSlotsOfADeadNodeAreFreed: a concurrency-4 tenant whose streams run on a
// node that is then killed (-9: no leave, no release) gets all its slots
// back once the node is declared dead, not after slot_ttl. Two cases: the
// owner itself dies with its streams (the survivors take over from its
// snapshot, which lists the slots), and a previous owner dies after handing
// the tenant over with its streams still running there.
func TestSlotsOfADeadNodeAreFreed(t *testing.T) {
	const conc = 4
	for _, tc := range []struct {
		name  string
		redis bool
		// handOver: the streams run on a previous owner (a node joins
		// and takes the tenant before the streams' node dies).
		handOver bool
	}{
		{"owner killed, redis", true, false},
		{"previous owner killed, redis", true, true},
		{"previous owner killed, no redis", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, after := []string{"n1", "n2", "n3"}, []string{"n1", "n2", "n3", "n4"}
			if !tc.handOver {
				after = before
			}
			names, _ := hoPick(t, "sl", before, after, map[bool]int{true: 1, false: 0}[tc.handOver], map[bool]int{true: 0, false: 1}[tc.handOver])
			tn := names[0]
			tcfg := clTenant(tn, 1000)
			tcfg.Concurrency = conc
			opts := clOptions{}
			if tc.redis {
				rds := redistest.Start(t)
				opts = clOptions{Redis: rds.Addr(), SnapshotInterval: hoSnapInterval, HandoffWait: hoHandoffWait, RedisTimeout: hoRedisTimeout}
			}
			c := startClusterWith(t, 3, 3*time.Second, opts, tcfg)
			tok, _ := reserve.NewTokenizer()
			// 50 completion tokens, one every 100 ms: 5 s streams.
			c.fake.SetOptions(fakeupstream.Options{CountTokens: tok.Count, CompletionMin: 50, CompletionMax: 50, ChunkInterval: 100 * time.Millisecond})
			runner := c.byName(c.owner(tn))
			var hangUps []func()
			for range conc {
				st, h := c.openStream(runner, tn)
				hangUps = append(hangUps, h)
				if st != http.StatusOK {
					t.Fatalf("stream on %s: status %d", runner.Name(), st)
				}
			}
			defer func() {
				for _, h := range hangUps {
					h()
				}
			}()
			if tc.handOver {
				nn := c.addNode()
				c.waitConverged(10 * time.Second)
				if o := c.owner(tn); o != nn.Name() {
					t.Fatalf("%s did not move to %s (owner %s)", tn, nn.Name(), o)
				}
				if n := inFlight(t, c, nn, tn); n != conc {
					t.Fatalf("new owner counts %d slots in flight, want the %d streams on %s", n, conc, runner.Name())
				}
			}
			if tc.redis {
				time.Sleep(2 * hoSnapInterval) // the streams' slots are in a snapshot
			}
			killed := time.Now()
			if err := runner.Close(); err != nil {
				t.Logf("close %s: %v", runner.Name(), err)
			}
			runner.gone = true
			c.waitConverged(10 * time.Second)
			detected := time.Since(killed)
			c.fake.SetOptions(fakeupstream.Options{CountTokens: tok.Count, CompletionMin: 50, CompletionMax: 50, ChunkInterval: 50 * time.Millisecond})
			via := c.live()[0]
			deadline := time.Now().Add(time.Second)
			for {
				ok, statuses := c.allSlots(via, tn, conc)
				if ok {
					break
				}
				o := c.byName(c.owner(tn))
				if time.Now().After(deadline) {
					t.Fatalf("%v after %s was killed (detected after %v), %d streams of %s are still not admitted at once (answers %v); owner %s counts %d in flight",
						time.Since(killed).Round(time.Millisecond), runner.Name(), detected.Round(time.Millisecond), conc, tn, statuses, o.Name(), inFlight(t, c, o, tn))
				}
				// The try's own streams hold slots until the owner sees
				// the hang-up (its next chunk's write fails): wait for
				// that rather than count them against the next try.
				pollUntil(time.Until(deadline), func() bool { return inFlight(t, c, o, tn) == 0 })
			}
			t.Logf("all %d slots usable %v after the kill (detected after %v)", conc, time.Since(killed).Round(time.Millisecond), detected.Round(time.Millisecond))
		})
	}
}
