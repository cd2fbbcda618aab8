package node

// Multi-node tests: real nodes on loopback gossiping with LANFast timings, a
// fake provider behind them, load through every node, audits from what the
// provider received. Windows are short (2-3 s) so the whole file runs in well
// under a minute, with -race, on 2 cores.
//
//	go test -race ./node/ -run Cluster -v

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/reserve"
)

// clJitter is how much earlier than its admission (at the owner) a request
// may reach the fake provider, relative to another one: admission and
// arrival are a loopback hop apart, and that hop's duration varies by a few
// ms (more under -race on 2 cores). The sliding-window audits count arrivals
// in (t-window+clJitter, t]; the limiter itself is conservative by one
// bucket (window/128), not by this.
const clJitter = 30 * time.Millisecond

// clResult is one request sent by clLoad.
type clResult struct {
	tenant string
	via    string // node the client sent it to
	rep    clReply
	err    error
	sent   time.Time     // when it was sent
	took   time.Duration // until the whole answer was read
}

// clLoad sends chat completions for tenant at start, start+interval, ...
// while before start+dur, round-robin over vias beginning at vias[offset],
// with at most maxInFlight at once; it returns every result.
func (c *clCluster) clLoad(tenant string, vias []*clNode, offset int, start time.Time, interval, dur time.Duration, maxInFlight int) []clResult {
	var (
		mu  sync.Mutex
		out []clResult
		wg  sync.WaitGroup
	)
	sem := make(chan struct{}, maxInFlight)
	maxCount := int(dur/interval) + 1
	for i := 0; i < maxCount; i++ {
		at := start.Add(time.Duration(i) * interval)
		if !at.Before(start.Add(dur)) {
			break
		}
		time.Sleep(time.Until(at)) // pacing, not waiting for a condition
		sem <- struct{}{}
		via := vias[(offset+i)%len(vias)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sent := time.Now()
			rep, err := c.post(via, tenant, false, nil)
			took := time.Since(sent)
			mu.Lock()
			out = append(out, clResult{tenant: tenant, via: via.Name(), rep: rep, err: err, sent: sent, took: took})
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// TestClusterEnforcesEachTenantOnce: with load for every tenant spread over
// every node, each tenant is enforced by exactly one node (its ring owner),
// so the provider never sees more than the tenant's limit in any window, and
// it sees nearly all of it.
func TestClusterEnforcesEachTenantOnce(t *testing.T) {
	const (
		rpm    = 20
		window = 2 * time.Second
	)
	tenants := []string{"acme", "globex", "initech", "umbrella"}
	var tcs []config.Tenant
	for _, name := range tenants {
		tcs = append(tcs, clTenant(name, rpm))
	}
	c := startCluster(t, 3, window, tcs...)
	owners := map[string]string{}
	for _, tn := range tenants {
		owners[tn] = c.owner(tn)
	}
	// Ring versions are each node's own count of rings it built.
	versions := map[string]uint64{}
	for _, nd := range c.nodes {
		versions[nd.Name()] = nd.Ring().Version()
	}
	t.Logf("owners: %v", owners)

	// Open the peer connections first (one request per tenant through
	// each node that does not own it), so the measured load does not
	// start with every edge dialing every owner at once. These admissions
	// count in the first window like any other.
	warm := map[string]int{}
	for _, tn := range tenants {
		for _, nd := range c.nodes {
			if nd.Name() == owners[tn] {
				continue
			}
			warm[tn]++
			rep, err := c.post(nd, tn, false, nil)
			if err != nil || rep.status != http.StatusOK || rep.node != owners[tn] {
				t.Fatalf("warm-up %s via %s: %v %v, want 200 from %s", tn, nd.Name(), rep, err, owners[tn])
			}
		}
	}

	// Twice each tenant's rate for four windows.
	interval := window / (2 * rpm)
	dur := 4 * window
	start := time.Now().Add(50 * time.Millisecond)
	results := make([][]clResult, len(tenants))
	var wg sync.WaitGroup
	for i, tn := range tenants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.clLoad(tn, c.nodes, i, start, interval, dur, 4)
		}()
	}
	wg.Wait()

	for _, nd := range c.nodes {
		if v := nd.Ring().Version(); v != versions[nd.Name()] {
			t.Fatalf("%s: ring moved to v%d during the load (was v%d): membership not stable", nd.Name(), v, versions[nd.Name()])
		}
	}
	for i, tn := range tenants {
		ok, limited := 0, 0
		bad := 0
		for _, r := range results[i] {
			switch {
			case r.err != nil:
				t.Errorf("%s via %s: %v", tn, r.via, r.err)
			case r.rep.status != http.StatusOK && r.rep.status != http.StatusTooManyRequests:
				t.Errorf("%s via %s: %v", tn, r.via, r.rep)
			case r.rep.node != owners[tn]:
				bad++
				if bad <= 3 {
					t.Errorf("%s via %s: answered by %q, owner is %s (%v)", tn, r.via, r.rep.node, owners[tn], r.rep)
				}
			}
			if r.err == nil {
				switch r.rep.status {
				case http.StatusOK:
					ok++
				case http.StatusTooManyRequests:
					limited++
				}
			}
		}
		if bad > 3 {
			t.Errorf("%s: %d answers in all not from the owner", tn, bad)
		}
		if bad > 0 {
			// Say why: an edge that failed to connect to the owner
			// within forward_connect_timeout serves its strict share
			// itself for the peer-down backoff.
			for _, nd := range c.nodes {
				for _, e := range nd.log.find(map[string]any{"msg": "fallback", "tenant": tn}) {
					t.Errorf("%s: %s logged %v", tn, nd.Name(), e)
				}
			}
		}

		recs := c.records(tn)
		if len(recs) != warm[tn]+ok {
			t.Errorf("%s: %d answers 200 (+%d warm-up) but the provider received %d requests", tn, ok, warm[tn], len(recs))
		}
		times := clReceived(recs)
		strict, strictAt := clMaxSliding(times, window)
		worst, worstAt := clMaxSliding(times, window-clJitter)
		// The nodes' decisions, stamped by the clock they share, are the
		// promise itself: never more than the limit in any whole window.
		decided := c.decided(tn)
		most, mostAt := clMaxSliding(decided, window)
		if most > rpm {
			t.Errorf("%s: the nodes decided %d admissions within %v ending %s (limit %d)",
				tn, most, window, mostAt.Sub(start).Round(time.Millisecond), rpm)
		}
		switch {
		case worst <= rpm:
		case len(recs) > len(decided) || most > rpm:
			t.Errorf("%s: %d requests reached the provider within %v ending %s (limit %d per %v)",
				tn, worst, window-clJitter, worstAt.Sub(start).Round(time.Millisecond), rpm, window)
		default:
			// Every arrival was decided, within the limit in every
			// window: the calls took unequal times on the way after their
			// decisions (more than clJitter apart on a loaded machine).
			t.Logf("%s: %d arrived at the provider within %v ending %s, but the nodes decided at most %d in any %v: delays on the way",
				tn, worst, window-clJitter, worstAt.Sub(start).Round(time.Millisecond), most, window)
		}
		var perWindow []int
		sum := 0
		for k := 1; k < int(dur/window); k++ {
			n := clCountIn(times, start.Add(time.Duration(k)*window), start.Add(time.Duration(k+1)*window))
			perWindow = append(perWindow, n)
			sum += n
		}
		avg := float64(sum) / float64(len(perWindow))
		if avg < 0.95*rpm {
			t.Errorf("%s: admitted %.1f per window on average in the full windows after the first %v, want >= %.1f",
				tn, avg, perWindow, 0.95*rpm)
		}
		t.Logf("%s (owner %s): sent %d (+%d warm-up), 200 %d, 429 %d; provider got %d; max in any %v: %d (strict %v: %d at +%s); decided %d, max in any %v: %d; windows 2..%d: %v",
			tn, owners[tn], len(results[i]), warm[tn], ok, limited, len(recs), window-clJitter, worst, window, strict,
			strictAt.Sub(start).Round(time.Millisecond), len(decided), window, most, int(dur/window), perWindow)
	}
}

// TestClusterMembership: a node joins, one drains, one crashes; each time the
// survivors converge on one ring, and the ring change is logged.
func TestClusterMembership(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of gossip or load: not in -short")
	}
	var tcs []config.Tenant
	for i := range 16 {
		tcs = append(tcs, clTenant(fmt.Sprintf("t%02d", i), 100))
	}
	c := startCluster(t, 4, 2*time.Second, tcs...)

	// Join.
	joinStart := time.Now()
	c.addNode()
	took := c.waitConverged(10 * time.Second)
	t.Logf("join: 5 nodes converged %v after the 5th started (%v after Start was called)",
		took.Round(time.Millisecond), time.Since(joinStart).Round(time.Millisecond))

	// Graceful drain of n2: /readyz turns 503 while it drains; the others
	// drop it from their rings without waiting for it to finish.
	dn := c.byName("n2")
	drainStart := time.Now()
	drained := make(chan bool, 1)
	go func() { drained <- dn.Drain() }()
	saw503 := false
	for !saw503 {
		select {
		case <-drained:
			t.Fatalf("Drain finished before /readyz on %s was seen answering 503", dn.Name())
		default:
		}
		st, err := c.getStatus(dn, "/readyz")
		if err == nil && st == http.StatusServiceUnavailable {
			saw503 = true
			continue
		}
		if time.Since(drainStart) > 5*time.Second {
			t.Fatalf("/readyz on draining %s: %d %v, want 503", dn.Name(), st, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("drain: /readyz on %s answered 503 %v after Drain was called", dn.Name(), time.Since(drainStart).Round(time.Millisecond))
	dn.gone = true
	c.waitConverged(5 * time.Second)
	took = time.Since(drainStart)
	t.Logf("drain: the 4 others converged without %s %v after Drain was called", dn.Name(), took.Round(time.Millisecond))
	select {
	case clean := <-drained:
		if !clean {
			t.Errorf("Drain of %s reported in-flight work cut", dn.Name())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Drain of %s did not return within 10s", dn.Name())
	}
	t.Logf("drain: Drain returned %v after it was called", time.Since(drainStart).Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("survivors took %v to drop draining %s, want well under the crash detection time", took, dn.Name())
	}

	// Crash of n3: no leave; the survivors detect it.
	cn := c.byName("n3")
	var owned []string
	for _, tc := range tcs {
		if c.owner(tc.Name) == cn.Name() {
			owned = append(owned, tc.Name)
		}
	}
	logMark := map[string]int{}
	for _, nd := range c.live() {
		logMark[nd.Name()] = len(nd.log.entries())
	}
	if err := cn.Close(); err != nil {
		t.Logf("close %s: %v", cn.Name(), err)
	}
	cn.gone = true
	took = c.waitConverged(10 * time.Second)
	t.Logf("crash: the 3 survivors converged without %s %v after it was closed (it owned %v)", cn.Name(), took.Round(time.Millisecond), owned)
	if took > 6*time.Second {
		t.Errorf("crash detection took %v, want under ~5s (LANFast)", took)
	}

	// Every survivor logged the change: the newest rebalance line carries
	// its ring version and the survivors as members, and the lines since
	// the crash name every tenant the crashed node owned as moved.
	want := []string{"n1", "n4", "n5"}
	for _, nd := range c.live() {
		all := nd.log.find(map[string]any{"msg": "rebalance"})
		if len(all) == 0 {
			t.Errorf("%s: no rebalance log line", nd.Name())
			continue
		}
		last := all[len(all)-1]
		rv, ok1 := last["ring_version"].(float64)
		_, ok2 := last["moved"].(float64)
		if !ok1 || !ok2 {
			t.Errorf("%s: rebalance line without numeric ring_version and moved: %v", nd.Name(), last)
			continue
		}
		if uint64(rv) != nd.Ring().Version() {
			t.Errorf("%s: last rebalance line has ring_version %v, ring is v%d", nd.Name(), rv, nd.Ring().Version())
		}
		var members []string
		if ms, ok := last["members"].([]any); ok {
			for _, m := range ms {
				members = append(members, fmt.Sprint(m))
			}
		}
		slices.Sort(members)
		if !slices.Equal(members, want) {
			t.Errorf("%s: last rebalance line has members %v, want %v", nd.Name(), members, want)
		}
		// Since the crash: the moved counts add up to at least the
		// tenants the crashed node owned (and, where the lines list
		// them, name each of those).
		moved, listed := map[string]bool{}, false
		movedSum := 0
		for _, e := range nd.log.entries()[logMark[nd.Name()]:] {
			if e["msg"] != "rebalance" {
				continue
			}
			if m, ok := e["moved"].(float64); ok {
				movedSum += int(m)
			}
			if mt, ok := e["moved_tenants"].([]any); ok {
				listed = true
				for _, m := range mt {
					moved[fmt.Sprint(m)] = true
				}
			}
		}
		if movedSum < len(owned) {
			t.Errorf("%s: rebalance lines since the crash report %d tenants moved, want >= %d (owned by crashed %s)",
				nd.Name(), movedSum, len(owned), cn.Name())
		}
		for _, tn := range owned {
			if listed && !moved[tn] {
				t.Errorf("%s: tenant %s (owned by crashed %s) not logged as moved since the crash", nd.Name(), tn, cn.Name())
			}
		}
		t.Logf("%s: last rebalance: ring_version=%v moved=%v took_ms=%v", nd.Name(), last["ring_version"], last["moved"], last["took_ms"])
	}

	// The survivors serve: a request through each is answered by the owner.
	tn := tcs[0].Name
	for _, nd := range c.live() {
		rep, err := c.post(nd, tn, false, nil)
		if err != nil || rep.status != http.StatusOK || rep.node != c.owner(tn) {
			t.Errorf("after the crash, %s via %s: %v %v, want 200 from %s", tn, nd.Name(), rep, err, c.owner(tn))
		}
	}
}

// TestClusterFallback: with the owner alive in gossip but its HTTP
// unreachable, an edge enforces its strict share (limit / members) itself,
// logs the episode once, and hands the tenant back to the owner once it
// answers again.
func TestClusterFallback(t *testing.T) {
	t.Run("tenant", func(t *testing.T) { testClusterFallback(t, false) })
	// The limit is the team's: the edge's share of it holds, and its
	// episode ends with the tenant's (a team episode left open would not
	// be seeded afresh the next time the owner goes silent).
	t.Run("team", func(t *testing.T) { testClusterFallback(t, true) })
}

func testClusterFallback(t *testing.T, team bool) {
	const (
		rpm    = 30
		window = 3 * time.Second
		share  = rpm / 3
	)
	limited := []string{"acme"} // the entities with a fallback episode
	var c *clCluster
	if team {
		tc := clTenant("acme", 1000)
		tc.Team = "crew"
		c = startClusterWith(t, 3, window, clOptions{Teams: []config.Team{{Name: "crew", RPM: rpm}}}, tc)
		limited = append(limited, "team/crew")
	} else {
		c = startCluster(t, 3, window, clTenant("acme", rpm))
	}
	o := c.byName(c.owner("acme"))
	e := c.edge(o.Name())
	t.Logf("owner %s, edge %s", o.Name(), e.Name())

	// Cut the owner's HTTP before any traffic: the edge has no pooled
	// connection to it.
	addr := o.Addr()
	if err := o.ln.Close(); err != nil {
		t.Fatalf("close %s's listener: %v", o.Name(), err)
	}

	// About 1.5x the share's rate for a window and a bit, all to the edge.
	start := time.Now()
	res := c.clLoad("acme", []*clNode{e}, 0, start, 200*time.Millisecond, window+600*time.Millisecond, 2)
	admitted := 0
	for _, r := range res {
		switch {
		case r.err != nil:
			t.Errorf("via %s: %v", r.via, r.err)
		case r.rep.status != http.StatusOK && r.rep.status != http.StatusTooManyRequests:
			t.Errorf("via %s: %v", r.via, r.rep)
		case r.rep.node != e.Name():
			t.Errorf("via %s: answered by %q, want the edge %s: %v", r.via, r.rep.node, e.Name(), r.rep)
		case r.rep.status == http.StatusOK:
			admitted++
		}
	}
	recs := c.records("acme")
	worst, at := clMaxSliding(clReceived(recs), window-clJitter)
	if worst > share {
		t.Errorf("fallback admitted %d within %v ending +%s, want at most %d (%d/3 members)",
			worst, window-clJitter, at.Sub(start).Round(time.Millisecond), share, rpm)
	}
	if admitted == 0 || len(recs) != admitted {
		t.Errorf("fallback: %d answers 200, provider got %d requests", admitted, len(recs))
	}
	for _, name := range limited {
		starts := e.log.find(map[string]any{"msg": "fallback", "phase": "start", "tenant": name})
		if len(starts) != 1 {
			t.Errorf("edge logged %d fallback starts for %s, want exactly 1: %v", len(starts), name, starts)
		} else if starts[0]["owner"] != o.Name() {
			t.Errorf("fallback start names owner %v, want %s", starts[0]["owner"], o.Name())
		}
	}
	t.Logf("fallback: sent %d to %s, admitted %d, max %d in any %v (share %d)", len(res), e.Name(), admitted, worst, window-clJitter, share)

	// Bring the owner's HTTP back on the same address.
	var ln net.Listener
	deadline := time.Now().Add(3 * time.Second)
	for {
		var err error
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("listen again on %s: %v", addr, err)
		}
		time.Sleep(clPollEvery)
	}
	o.ln = ln
	served := make(chan error, 1)
	go func() { served <- o.server.Serve(ln) }()
	restored := time.Now()

	// After the peer-down backoff, the edge forwards to the owner again.
	deadline = restored.Add(5 * time.Second)
	for {
		rep, err := c.post(e, "acme", false, nil)
		if err != nil {
			t.Fatalf("via %s after the owner came back: %v", e.Name(), err)
		}
		if rep.status != http.StatusOK && rep.status != http.StatusTooManyRequests {
			t.Fatalf("via %s after the owner came back: %v", e.Name(), rep)
		}
		if rep.node == o.Name() {
			break
		}
		if rep.node != e.Name() {
			t.Fatalf("via %s: answered by %q", e.Name(), rep.node)
		}
		if time.Now().After(deadline) {
			t.Fatalf("edge still answers itself %v after the owner's HTTP came back", time.Since(restored))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("owner answers again via the edge %v after its HTTP came back", time.Since(restored).Round(time.Millisecond))
	for range 3 {
		rep, err := c.post(e, "acme", false, nil)
		if err != nil || rep.status != http.StatusOK || rep.node != o.Name() {
			t.Errorf("via %s: %v %v, want 200 from %s", e.Name(), rep, err, o.Name())
		}
	}
	for _, name := range limited {
		if ends := e.log.find(map[string]any{"msg": "fallback", "phase": "end", "tenant": name}); len(ends) != 1 {
			t.Errorf("edge logged %d fallback ends for %s, want exactly 1", len(ends), name)
		}
	}
	// What the edge admitted under its share reached the owner, which
	// counts it (the episode's end delivered it at the latest).
	deadline = time.Now().Add(2 * time.Second)
	for c.metric(e, "ringgate_fallback_reported_total") < float64(admitted) || c.metric(o, "ringgate_handoff_deltas_applied_total") < float64(admitted) {
		if time.Now().After(deadline) {
			t.Fatalf("edge reported %v fallback admissions of %d, owner applied %v deltas", c.metric(e, "ringgate_fallback_reported_total"),
				admitted, c.metric(o, "ringgate_handoff_deltas_applied_total"))
		}
		time.Sleep(clPollEvery)
	}
	select {
	case err := <-served:
		t.Errorf("restored listener stopped serving: %v", err)
	default:
	}
}

// TestClusterForgedHopRefused: a request that claims to be a peer hop but is
// not signed with the cluster secret is refused with 401 and never reaches
// the provider.
func TestClusterForgedHopRefused(t *testing.T) {
	c := startCluster(t, 3, 2*time.Second, clTenant("acme", 100))
	owner := c.byName(c.owner("acme"))
	edge := c.edge(owner.Name())
	before := len(c.fake.Records())
	nonce := hex.EncodeToString([]byte("0123456789ab"))
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	ver := strconv.FormatUint(owner.Ring().Version(), 10)
	fakeSig := strings.Repeat("ab", 32)
	cases := []struct {
		name string
		to   *clNode
		hdr  map[string]string
	}{
		{"well-formed hop, made-up signature, to the owner", owner, map[string]string{
			"X-Ringgate-Hop": edge.Name() + "," + owner.Name() + "," + ver + "," + now + "," + nonce, "X-Ringgate-Signature": fakeSig}},
		{"well-formed hop, made-up signature, to an edge", edge, map[string]string{
			"X-Ringgate-Hop": owner.Name() + "," + edge.Name() + "," + ver + "," + now + "," + nonce, "X-Ringgate-Signature": fakeSig}},
		{"hop without signature", owner, map[string]string{
			"X-Ringgate-Hop": edge.Name() + "," + owner.Name() + "," + ver + "," + now + "," + nonce}},
		{"signature without hop", owner, map[string]string{"X-Ringgate-Signature": fakeSig}},
		{"malformed hop", edge, map[string]string{"X-Ringgate-Hop": "n1", "X-Ringgate-Signature": fakeSig}},
	}
	for _, tc := range cases {
		rep, err := c.post(tc.to, "acme", false, tc.hdr)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if rep.status != http.StatusUnauthorized {
			t.Errorf("%s: %v, want 401", tc.name, rep)
		} else if !strings.Contains(string(rep.body), `"invalid_peer_signature"`) {
			t.Errorf("%s: 401 without code invalid_peer_signature: %s", tc.name, rep.body)
		}
	}
	// A genuine request afterwards reaches the provider; only it does.
	rep, err := c.post(edge, "acme", false, nil)
	if err != nil || rep.status != http.StatusOK {
		t.Fatalf("genuine request: %v %v", rep, err)
	}
	if got := len(c.fake.Records()); got != before+1 {
		t.Errorf("provider got %d requests, want exactly the 1 genuine one", got-before)
	}
}

// TestClusterStreamThroughEdge: an SSE stream sent to a node that does not
// own the tenant comes back whole, from the owner, as it is produced.
func TestClusterStreamThroughEdge(t *testing.T) {
	c := startCluster(t, 3, 2*time.Second, clTenant("acme", 100))
	tok, _ := reserve.NewTokenizer()
	const chunks, every = 15, 20 * time.Millisecond
	c.fake.SetOptions(fakeupstream.Options{
		CountTokens: tok.Count, CompletionMin: chunks, CompletionMax: chunks, ChunkInterval: every, Latency: 5 * time.Millisecond,
	})
	owner := c.owner("acme")
	edge := c.edge(owner)

	ctx, cancel := context.WithTimeout(context.Background(), clReqTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+edge.Addr()+"/v1/chat/completions",
		strings.NewReader(string(clChatBody("acme", true))))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-acme")
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatalf("stream via %s: %v", edge.Name(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream via %s: status %d, content type %q", edge.Name(), resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if got := resp.Header.Get("x-ringgate-node"); got != owner {
		t.Errorf("stream via %s: x-ringgate-node %q, want the owner %s", edge.Name(), got, owner)
	}
	var (
		data        []string
		first, last time.Time
	)
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if strings.HasPrefix(line, "data: ") {
			if first.IsZero() {
				first = time.Now()
			}
			last = time.Now()
			data = append(data, strings.TrimSpace(strings.TrimPrefix(line, "data: ")))
		}
		if err != nil {
			break
		}
	}
	if len(data) == 0 || data[len(data)-1] != "[DONE]" {
		t.Fatalf("stream via %s did not end with data: [DONE]: %d data lines, last %q", edge.Name(), len(data), data[max(len(data)-1, 0):])
	}
	// The edge relays as the owner writes: the data lines arrive spread
	// over the stream's duration, not in one piece at the end.
	spread := last.Sub(first)
	if spread < chunks*every/2 {
		t.Errorf("stream's data lines arrived within %v, want them spread over ~%v (relayed as produced)", spread, chunks*every)
	}
	recs := c.records("acme")
	if len(recs) != 1 || !recs[0].Stream || !recs[0].IncludeUsage {
		t.Fatalf("provider records: %+v, want one stream asking for usage", recs)
	}
	t.Logf("stream via %s from %s: %d data lines over %v", edge.Name(), owner, len(data), spread.Round(time.Millisecond))
}

// TestClusterEdgeHangupFreesOwnerSlot: a client that hangs up mid-stream on
// an edge frees its concurrency slot on the owner at once: the edge closes
// its hop, the owner's write fails, the owner cuts the upstream call.
func TestClusterEdgeHangupFreesOwnerSlot(t *testing.T) {
	tenant := clTenant("acme", 100)
	tenant.Concurrency = 1
	c := startCluster(t, 3, 2*time.Second, tenant)
	tok, _ := reserve.NewTokenizer()
	// 50 completion tokens (the body's max_tokens), one every 100 ms: a
	// 5 s stream, far longer than the wait for the slot below.
	c.fake.SetOptions(fakeupstream.Options{
		CountTokens: tok.Count, CompletionMin: 50, CompletionMax: 50, ChunkInterval: 100 * time.Millisecond,
	})
	owner := c.byName(c.owner("acme"))
	edge := c.edge(owner.Name())

	conn, err := net.Dial("tcp", edge.Addr())
	if err != nil {
		t.Fatal(err)
	}
	body := clChatBody("acme", true)
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer sk-acme\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", edge.Addr(), len(body), body)
	br := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(clReqTimeout))
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("no stream event before the hang-up: %v", err)
		}
		if strings.HasPrefix(line, "data: ") {
			break
		}
	}
	if n := inFlight(t, c, owner, "acme"); n != 1 {
		t.Fatalf("owner holds %d slots during the stream, want 1", n)
	}
	hungUp := time.Now()
	conn.Close()

	deadline := hungUp.Add(3 * time.Second) // the stream itself runs 5 s
	for inFlight(t, c, owner, "acme") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the owner still holds the slot 3 s after the client hung up on the edge")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		recs := c.records("acme")
		if len(recs) == 1 && recs[0].Aborted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upstream call was not cut: %+v", recs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("slot freed and upstream call cut %v after the hang-up", time.Since(hungUp).Round(time.Millisecond))
	c.fake.SetOptions(fakeupstream.Options{CountTokens: tok.Count, CompletionMin: 5, CompletionMax: 5})
	if r, err := c.post(edge, "acme", false, nil); err != nil || r.status != http.StatusOK {
		t.Fatalf("next request after the hang-up: %+v %v", r, err)
	}
}

// inFlight reads a tenant's slots in use from nd's admin API.
func inFlight(t *testing.T, c *clCluster, nd *clNode, tenant string) int64 {
	return tenantUsage(t, c, nd, tenant).InFlight.Used
}

// usedRequests reads a tenant's requests in the window from nd's admin API.
func usedRequests(t *testing.T, c *clCluster, nd *clNode, tenant string) int64 {
	return tenantUsage(t, c, nd, tenant).Requests.Used
}

// tenantUsage reads nd's own view of tenant (/tenants/{tenant}?local=1:
// not its owner's, when nd does not own it).
func tenantUsage(t *testing.T, c *clCluster, nd *clNode, tenant string) (v struct {
	Requests struct{ Used int64 } `json:"requests"`
	InFlight struct{ Used int64 } `json:"in_flight"`
}) {
	t.Helper()
	resp, err := c.hc.Get("http://" + nd.Addr() + "/tenants/" + tenant + "?local=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestClusterTenantViewFromOwner: GET /tenants/{name} on any node answers
// with the owner's view (a load balancer picks the node); ?local=1 with the
// node's own. The owner unreachable: router/TestTenantViewFromOwner.
func TestClusterTenantViewFromOwner(t *testing.T) {
	c := startCluster(t, 3, 3*time.Second, clTenant("acme", 100))
	o := c.byName(c.owner("acme"))
	e := c.edge(o.Name())
	for i := range 3 {
		if r, err := c.post(e, "acme", false, nil); err != nil || r.status != http.StatusOK {
			t.Fatalf("request %d via %s: %+v %v", i, e.Name(), r, err)
		}
	}
	type view struct {
		Owner      string               `json:"owner"`
		Node       string               `json:"node"`
		OwnerError string               `json:"owner_error"`
		Requests   struct{ Used int64 } `json:"requests"`
	}
	get := func(nd *clNode, query string) view {
		t.Helper()
		resp, err := c.hc.Get("http://" + nd.Addr() + "/tenants/acme" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v view
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /tenants/acme%s on %s: %d %v", query, nd.Name(), resp.StatusCode, err)
		}
		return v
	}
	for _, tc := range []struct {
		nd    *clNode
		query string
		want  view
	}{
		{o, "", view{Owner: o.Name(), Node: o.Name()}},
		{e, "", view{Owner: o.Name(), Node: o.Name()}},
		{e, "?local=1", view{Owner: o.Name(), Node: e.Name()}},
	} {
		got := get(tc.nd, tc.query)
		wantUsed := int64(3)
		if tc.want.Node != o.Name() {
			wantUsed = 0 // the edge forwarded every request
		}
		if got.Owner != tc.want.Owner || got.Node != tc.want.Node || got.OwnerError != "" || got.Requests.Used != wantUsed {
			t.Errorf("GET /tenants/acme%s on %s: %+v, want owner %s, node %s, %d requests", tc.query, tc.nd.Name(), got, tc.want.Owner, tc.want.Node, wantUsed)
		}
	}
}

// TestClusterFallbackZeroShare: a limit smaller than the member count leaves
// an edge a share of zero while the owner is unreachable; the edge refuses
// with 429 rather than admit anything the owner might also admit.
func TestClusterFallbackZeroShare(t *testing.T) {
	c := startCluster(t, 3, 3*time.Second, clTenant("tiny", 2))
	o := c.byName(c.owner("tiny"))
	e := c.edge(o.Name())
	if err := o.ln.Close(); err != nil {
		t.Fatalf("close %s's listener: %v", o.Name(), err)
	}
	for i := 0; i < 3; i++ {
		r, err := c.post(e, "tiny", false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusTooManyRequests || r.node != e.Name() || r.header.Get("Retry-After") == "" {
			t.Fatalf("request %d via %s: %+v, want a 429 with Retry-After from the edge", i, e.Name(), r)
		}
	}
	if recs := c.records("tiny"); len(recs) != 0 {
		t.Fatalf("a zero share let %d requests reach the provider", len(recs))
	}
	// The edge decided: its refused line says which limit and when to
	// retry, as the answer did (Retry-After 1).
	refused := linesOf(e.log.entries(), "refused")
	if len(refused) == 0 || refused[0]["limit_level"] != "fallback_share" || refused[0]["dimension"] != "requests" ||
		refused[0]["retry_after_ms"] != 1000.0 || refused[0]["tenant"] != "tiny" {
		t.Errorf("the edge's refused lines %v, want fallback_share on requests, retry after 1000 ms", refused)
	}
}

// A client that hangs up on the edge while its request waits at the owner
// for the upstream's first byte: the edge tells the owner, which frees the
// tenant's slot at once, not when the upstream answers.
func TestClusterEdgeHangupBeforeFirstByte(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of gossip or load: not in -short")
	}
	tenant := clTenant("acme", 100)
	tenant.Concurrency = 1
	c := startCluster(t, 3, 2*time.Second, tenant)
	tok, _ := reserve.NewTokenizer()
	c.fake.SetOptions(fakeupstream.Options{CountTokens: tok.Count, CompletionMin: 5, CompletionMax: 5, Latency: 3 * time.Second})
	owner := c.byName(c.owner("acme"))
	edge := c.edge(owner.Name())

	conn, err := net.Dial("tcp", edge.Addr())
	if err != nil {
		t.Fatal(err)
	}
	body := clChatBody("acme", false)
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer sk-acme\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", edge.Addr(), len(body), body)
	deadline := time.Now().Add(2 * time.Second)
	for inFlight(t, c, owner, "acme") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the owner never took the call")
		}
		time.Sleep(10 * time.Millisecond)
	}
	hungUp := time.Now()
	conn.Close()
	// The upstream answers 3 s after the request: the slot must be back
	// while it has not (its record still open).
	for inFlight(t, c, owner, "acme") != 0 {
		if time.Since(hungUp) > 2*time.Second {
			t.Fatal("the owner still holds the slot 2 s after the client hung up on the edge")
		}
		time.Sleep(10 * time.Millisecond)
	}
	freed := time.Since(hungUp)
	if recs := c.records("acme"); len(recs) != 1 || !recs[0].Finished.IsZero() {
		t.Fatalf("the slot came back only when the upstream answered: %+v", recs)
	}
	t.Logf("owner's slot freed %v after the client hung up on the edge (upstream latency 3 s)", freed.Round(time.Millisecond))
}
