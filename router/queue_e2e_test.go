package router_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
)

// A tenant with 4 slots and 8 clients streaming back to back: the requests
// its slots have no room for wait in its line and go in as each stream
// ends, instead of a 429 each. The same load without the queue is the
// baseline, in the same run.
func TestQueueConcurrencyStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of load")
	}
	const slots, clients = 4, 8
	const dur = 3 * time.Second
	run := func(q *config.Queue) (codes map[int]int, refused, used float64, maxAtOnce int, queuedMs []string) {
		e := newEnv(t, envConfig{
			tenants: []config.Tenant{tenantCfg("acme", 1_000_000, 1_000_000_000, slots)},
			fake:    fakeupstream.Options{Latency: 20 * time.Millisecond, ChunkInterval: 4 * time.Millisecond, CompletionMin: 40, CompletionMax: 60},
			queue:   q,
		})
		var mu sync.Mutex
		codes = map[int]int{}
		var wg sync.WaitGroup
		end := time.Now().Add(dur)
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					r, err := e.sendStream("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 50, true, false))
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					codes[r.status]++
					if q := r.header.Get("x-ringgate-queued-ms"); q != "" && len(queuedMs) < 5 {
						queuedMs = append(queuedMs, q)
					}
					mu.Unlock()
					if r.status == http.StatusTooManyRequests {
						time.Sleep(retryAfterMs(r.header)) // a polite client
					}
				}
			}()
		}
		wg.Wait()
		var busy time.Duration
		var first, last time.Time
		for _, rec := range e.fake.Records() {
			if rec.Finished.IsZero() {
				continue
			}
			busy += rec.Finished.Sub(rec.Received)
			if first.IsZero() || rec.Received.Before(first) {
				first = rec.Received
			}
			if rec.Finished.After(last) {
				last = rec.Finished
			}
		}
		total := codes[200] + codes[429]
		refused = float64(codes[429]) / float64(max(1, total))
		used = float64(busy) / float64(time.Duration(slots)*last.Sub(first))
		return codes, refused, used, e.fake.Stats().MaxConcurrent, queuedMs
	}
	bCodes, bRefused, bUsed, _, _ := run(nil)
	codes, refused, used, atOnce, queuedMs := run(&config.Queue{InteractiveWait: 2 * time.Second, BatchWait: 60 * time.Second, MaxDepth: 1000})
	t.Logf("without the queue: answers %v (%.1f %% refused), slots busy %.0f %%", bCodes, 100*bRefused, 100*bUsed)
	t.Logf("with the queue: answers %v (%.1f %% refused), slots busy %.0f %%, at most %d at once; some x-ringgate-queued-ms: %v",
		codes, 100*refused, 100*used, atOnce, queuedMs)
	if refused > 0.10 {
		t.Errorf("%.1f %% of the requests refused, want <= 10 %%", 100*refused)
	}
	if used < 0.75 {
		t.Errorf("the slots were busy %.0f %% of the time, want >= 75 %%", 100*used)
	}
	if atOnce > slots {
		t.Errorf("%d calls at once at the provider, limit %d", atOnce, slots)
	}
	if len(codes) > 2 || codes[200] == 0 {
		t.Errorf("unexpected answers: %v", codes)
	}
}

// With one slot held, the line fills: a batch request (by header) waits
// behind interactive ones that came after it; a client that hangs up while
// it waits leaves the line at once and is never sent; a wait budget spent
// is a 429 with Retry-After.
func TestQueueOrderHangupAndBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of load")
	}
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("acme", 1_000_000, 1_000_000_000, 1)},
		fake:    fakeupstream.Options{Latency: 400 * time.Millisecond, CompletionMin: 5, CompletionMax: 5},
		queue:   &config.Queue{InteractiveWait: 3 * time.Second, BatchWait: 5 * time.Second, MaxDepth: 10},
	})
	body := func(user string) []byte {
		b, _ := json.Marshal(map[string]any{"model": openAIModel, "user": user, "max_tokens": 5,
			"messages": []map[string]string{{"role": "user", "content": "hi"}}})
		return b
	}
	send := func(user string, hdr map[string]string, got chan<- reply) {
		go func() {
			r, err := e.do(http.MethodPost, "/v1/chat/completions", keyOf("acme"), body(user), hdr)
			if err != nil {
				t.Errorf("%s: %v", user, err)
			}
			got <- r
		}()
	}
	queued := func(n int64) {
		t.Helper()
		if !poll(settleWait, func() bool { v, err := e.tenant("acme"); return err == nil && v.Queued == n }) {
			v, _ := e.tenant("acme")
			t.Fatalf("%d queued, want %d", v.Queued, n)
		}
	}
	got := make(chan reply, 8)
	send("holder", nil, got) // takes the slot for 400 ms
	if !poll(settleWait, func() bool { v, err := e.tenant("acme"); return err == nil && v.InFlight.Used == 1 }) {
		t.Fatal("the first call never took the slot")
	}
	send("batch", map[string]string{"x-ringgate-priority": "batch"}, got)
	queued(1)
	if v, err := e.tenant("acme"); err != nil || v.Queue.Batch.Waiting != 1 || v.Queue.Interactive.Waiting != 0 {
		t.Errorf("/tenants/acme queue: %+v, %v; want one batch request waiting", v.Queue, err)
	}
	if m := string(e.get("/metrics", "").body); !strings.Contains(m, `ringgate_tenant_queued{class="batch",tenant="acme"} 1`) {
		t.Errorf("/metrics has no ringgate_tenant_queued for the batch request waiting")
	}
	// A client that gives up while it waits.
	ctx, cancel := context.WithCancel(context.Background())
	req := e.request(ctx, http.MethodPost, "/v1/chat/completions", keyOf("acme"), body("quitter"), nil)
	quit := make(chan struct{})
	go func() {
		defer close(quit)
		if resp, err := e.client.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	queued(2)
	cancel()
	<-quit
	queued(1)
	send("inter-1", nil, got)
	queued(2)
	send("inter-2", nil, got)
	queued(3)
	for range 4 {
		if r := <-got; r.status != http.StatusOK {
			t.Errorf("answer %v", r)
		}
	}
	var order []string
	for _, rec := range e.fake.Records() {
		order = append(order, rec.User)
		if rec.User == "quitter" {
			t.Error("the request whose client hung up while it waited was sent")
		}
	}
	t.Logf("order at the provider: %v", order)
	want := []string{"holder", "inter-1", "inter-2", "batch"}
	if len(order) != len(want) {
		t.Fatalf("the provider saw %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("the provider saw %v, want %v", order, want)
		}
	}

	// A wait budget spent: the slot held for longer than interactive_wait.
	e2 := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("acme", 1_000_000, 1_000_000_000, 1)},
		fake:    fakeupstream.Options{Latency: 1500 * time.Millisecond, CompletionMin: 5, CompletionMax: 5},
		queue:   &config.Queue{InteractiveWait: 300 * time.Millisecond, BatchWait: time.Second, MaxDepth: 10},
	})
	hold := make(chan reply, 1)
	go func() {
		r, _ := e2.do(http.MethodPost, "/v1/chat/completions", keyOf("acme"), body("holder"), nil)
		hold <- r
	}()
	if !poll(settleWait, func() bool { v, err := e2.tenant("acme"); return err == nil && v.InFlight.Used == 1 }) {
		t.Fatal("the first call never took the slot")
	}
	start := time.Now()
	r := e2.post("/v1/chat/completions", keyOf("acme"), body("late"), nil)
	waited := time.Since(start)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" || r.header.Get("x-ringgate-queued-ms") == "" {
		t.Errorf("past the wait budget: %v (headers %v)", r, r.header)
	}
	if waited < 300*time.Millisecond || waited > 1200*time.Millisecond {
		t.Errorf("refused after %v, the budget is 300ms", waited)
	}
	if !bytes.Contains(r.body, []byte("rate_limit_exceeded")) {
		t.Errorf("refusal body: %s", r.body)
	}
	<-hold
}

// At twice a tenant's concurrency, interactive and batch clients together
// (batch by header): interactive requests wait within their budget while
// batch ones still progress with their share.
func TestQueueInteractiveBeforeBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of load")
	}
	const slots = 2
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("acme", 1_000_000, 1_000_000_000, slots)},
		fake:    fakeupstream.Options{Latency: 50 * time.Millisecond, CompletionMin: 5, CompletionMax: 5},
		queue:   &config.Queue{InteractiveWait: time.Second, BatchWait: 20 * time.Second, MaxDepth: 1000},
	})
	type result struct {
		batch  bool
		status int
		took   time.Duration
	}
	var mu sync.Mutex
	var res []result
	var wg sync.WaitGroup
	end := time.Now().Add(3 * time.Second)
	client := func(batch bool) {
		defer wg.Done()
		hdr := map[string]string{}
		if batch {
			hdr["x-ringgate-priority"] = "batch"
		}
		for time.Now().Before(end) {
			start := time.Now()
			r, err := e.do(http.MethodPost, "/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 5, false, false), hdr)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			res = append(res, result{batch, r.status, time.Since(start)})
			mu.Unlock()
		}
	}
	for i := range 6 { // 2 interactive, 4 batch: three times the slots
		wg.Add(1)
		go client(i >= 2)
	}
	wg.Wait()
	var inter, batch []time.Duration
	refused := map[bool]int{}
	for _, r := range res {
		if r.status != http.StatusOK {
			refused[r.batch]++
			continue
		}
		if r.batch {
			batch = append(batch, r.took)
		} else {
			inter = append(inter, r.took)
		}
	}
	t.Logf("interactive: %d admitted (%d refused), median %v, p99 %v; batch: %d admitted (%d refused), median %v",
		len(inter), refused[false], pct(inter, 0.5), pct(inter, 0.99), len(batch), refused[true], pct(batch, 0.5))
	if refused[false] > 0 || pct(inter, 0.99) > time.Second+200*time.Millisecond {
		t.Errorf("interactive requests waited past their 1 s budget: p99 %v, %d refused", pct(inter, 0.99), refused[false])
	}
	if len(batch) < (len(inter)+len(batch))/8 {
		t.Errorf("batch got %d of %d admissions: starved", len(batch), len(inter)+len(batch))
	}
	if pct(inter, 0.5) >= pct(batch, 0.5) {
		t.Errorf("interactive median %v, batch %v: interactive should go first", pct(inter, 0.5), pct(batch, 0.5))
	}
}

// Requests that join a line behind others, on an upstream with its own
// and a model's limits: each takes the provider's budgets only when its
// turn comes, and gives them back when it is refused after waiting. Before,
// a joiner kept the budgets it took before joining and took them again
// when its turn came (an index out of range: the process died), and one
// refused after waiting never gave them back.
func TestQueueJoinerProviderBudgets(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of waiting: not in -short")
	}
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("acme", 1_000_000, 1_000_000_000, 1)},
		fake:    fakeupstream.Options{Latency: 500 * time.Millisecond, CompletionMin: 5, CompletionMax: 5},
		queue:   &config.Queue{InteractiveWait: 5 * time.Second, BatchWait: 5 * time.Second, MaxDepth: 2},
		openAI: func(u *config.Upstream) {
			u.RPM, u.Concurrency = 100000, 50
			u.ModelLimits = []config.ModelLimit{{Model: openAIModel, RPM: 100000}}
		},
	})
	got := make(chan reply, 8)
	for i := range 5 { // 1 runs, 2 wait (the second joins behind the first), 2 find the line full
		go func() {
			r, err := e.do(http.MethodPost, "/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 5, false, false), nil)
			if err != nil {
				t.Error(err)
			}
			got <- r
		}()
		if !poll(settleWait, func() bool {
			v, err := e.tenant("acme")
			return err == nil && v.InFlight.Used == 1 && v.Queued == int64(min(i, 2))
		}) {
			v, err := e.tenant("acme")
			t.Fatalf("request %d: not in flight or queued as expected: %+v %v", i, v, err)
		}
	}
	codes := map[int]int{}
	for range 5 {
		codes[(<-got).status]++
	}
	t.Logf("answers %v", codes)
	if codes[200] != 3 || codes[429] != 2 {
		t.Errorf("answers %v, want 3 admitted and 2 refused (line of 2)", codes)
	}
	if !poll(settleWait, func() bool { return e.upstreamSlotsInFlight() == 0 }) {
		t.Errorf("the provider's slots in flight stay at %d after every call ended", e.upstreamSlotsInFlight())
	}
}

// Queued requests go in the instant a charge leaves the window, packed at
// its edge: counted at the provider, the tenant's rpm still holds in every
// sliding window (shortened only by the loopback delay, as every window
// audit here is), while the clients get almost no 429.
func TestQueueHoldsRPMInEveryWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of load")
	}
	const rpm, window = 20, 2 * time.Second
	e := newEnv(t, envConfig{
		window:  window,
		tenants: []config.Tenant{tenantCfg("acme", rpm, 1_000_000_000, 100)},
		fake:    fakeupstream.Options{Latency: 5 * time.Millisecond, CompletionMin: 5, CompletionMax: 5},
		queue:   &config.Queue{InteractiveWait: 3 * time.Second, BatchWait: 3 * time.Second, MaxDepth: 1000},
	})
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	end := time.Now().Add(3 * window)
	for range 6 { // back to back: several times the limit
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				r, err := e.do(http.MethodPost, "/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 5, false, false), nil)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				codes[r.status]++
				mu.Unlock()
				if r.status == http.StatusTooManyRequests {
					time.Sleep(retryAfterMs(r.header))
				}
			}
		}()
	}
	wg.Wait()
	var evs []weighted
	for _, rec := range e.fake.Records() {
		evs = append(evs, weighted{at: rec.Received, w: 1})
	}
	worst, _ := maxSliding(evs, window-window/64)
	t.Logf("answers %v; at the provider %d, fullest window %d of %d", codes, len(evs), worst, rpm)
	if worst > rpm {
		t.Errorf("%d requests reached the provider within a window, rpm %d", worst, rpm)
	}
	if len(evs) < 3*rpm-rpm/2 {
		t.Errorf("only %d admitted in 3 windows of %d", len(evs), rpm)
	}
}

// pct is the q-quantile of ds.
func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// timed is one answer of a closed-loop client, with its latency.
type timed struct {
	tenant string
	status int
	took   time.Duration
	at     time.Time // answered
}

// sendTimed sends one chat completion as tenant and times its answer.
func sendTimed(t *testing.T, e *env, tenant string) (timed, http.Header, bool) {
	start := time.Now()
	r, err := e.do(http.MethodPost, "/v1/chat/completions", keyOf(tenant), chatBody(openAIModel, 5, false, false), nil)
	if err != nil {
		t.Error(err)
		return timed{}, nil, false
	}
	return timed{tenant, r.status, time.Since(start), time.Now()}, r.header, true
}

// closedLoop runs clients back to back until dur has passed, each
// sending as tenant with hdr; a 429 is followed by its Retry-After.
func closedLoop(t *testing.T, e *env, dur time.Duration, clients map[string]int) []timed {
	t.Helper()
	var mu sync.Mutex
	var res []timed
	var wg sync.WaitGroup
	end := time.Now().Add(dur)
	for tenant, n := range clients {
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					r, h, ok := sendTimed(t, e, tenant)
					if !ok {
						return
					}
					mu.Lock()
					res = append(res, r)
					mu.Unlock()
					if r.status == http.StatusTooManyRequests {
						time.Sleep(retryAfterMs(h))
					}
				}
			}()
		}
	}
	wg.Wait()
	return res
}

// The provider allows 4 calls at once, shared by an interactive tenant
// with 4 clients and a batch tenant with 12: both wait in the upstream's
// line on the node, interactive first, batch with its share. Interactive
// latency stays well below batch's, batch still completes, and the
// provider never sees more than 4 at once.
func TestQueueProviderConcurrencySharedByClasses(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of load")
	}
	inter := tenantCfg("inter", 1_000_000, 1_000_000_000, 100)
	bulk := tenantCfg("bulk", 1_000_000, 1_000_000_000, 100)
	bulk.Priority = config.PriorityBatch
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{inter, bulk},
		fake:    fakeupstream.Options{Latency: 50 * time.Millisecond, CompletionMin: 5, CompletionMax: 5},
		queue:   &config.Queue{InteractiveWait: 2 * time.Second, BatchWait: 20 * time.Second, MaxDepth: 1000},
		openAI:  func(u *config.Upstream) { u.Concurrency = 4 },
	})
	// While the load runs, /upstreams and /metrics show the line.
	seen := make(chan [2]int, 1)
	stop := make(chan struct{})
	go func() {
		var most [2]int // /upstreams' batch waiting, the metric's
		defer func() { seen <- most }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var v struct {
				Upstreams []struct {
					Budget *struct {
						Queue struct {
							Batch struct {
								Waiting int `json:"waiting"`
							} `json:"batch"`
						} `json:"queue"`
					} `json:"budget"`
				} `json:"upstreams"`
			}
			if r, err := e.do(http.MethodGet, "/upstreams", "", nil, nil); err == nil && json.Unmarshal(r.body, &v) == nil {
				for _, u := range v.Upstreams {
					if u.Budget != nil {
						most[0] = max(most[0], u.Budget.Queue.Batch.Waiting)
					}
				}
			}
			if r, err := e.do(http.MethodGet, "/metrics", "", nil, nil); err == nil {
				for _, line := range strings.Split(string(r.body), "\n") {
					if rest, ok := strings.CutPrefix(line, `ringgate_lease_queued{budget="up:`); ok && strings.Contains(rest, `class="batch"`) {
						n, _ := strconv.Atoi(rest[strings.LastIndexByte(rest, ' ')+1:])
						most[1] = max(most[1], n)
					}
				}
			}
		}
	}()
	res := closedLoop(t, e, 3*time.Second, map[string]int{"inter": 4, "bulk": 12})
	close(stop)
	if most := <-seen; most[0] == 0 || most[1] == 0 {
		t.Errorf("batch requests waiting for the provider never showed: /upstreams %d, ringgate_lease_queued %d", most[0], most[1])
	} else {
		t.Logf("batch requests waiting, most seen: /upstreams %d, ringgate_lease_queued %d", most[0], most[1])
	}
	lat := map[string][]time.Duration{}
	codes := map[string]map[int]int{"inter": {}, "bulk": {}}
	for _, r := range res {
		codes[r.tenant][r.status]++
		if r.status == http.StatusOK {
			lat[r.tenant] = append(lat[r.tenant], r.took)
		}
	}
	t.Logf("interactive: %v, median %v, p99 %v; batch: %v, median %v; at most %d at once at the provider",
		codes["inter"], pct(lat["inter"], 0.5), pct(lat["inter"], 0.99), codes["bulk"], pct(lat["bulk"], 0.5), e.fake.Stats().MaxConcurrent)
	if n := e.fake.Stats().MaxConcurrent; n > 4 {
		t.Errorf("%d calls at once at the provider, its limit 4", n)
	}
	if pct(lat["inter"], 0.5)*2 > pct(lat["bulk"], 0.5) {
		t.Errorf("interactive median %v, batch %v: want interactive well below (under half)", pct(lat["inter"], 0.5), pct(lat["bulk"], 0.5))
	}
	if len(lat["bulk"]) < len(res)/10 {
		t.Errorf("batch completed %d of %d: starved", len(lat["bulk"]), len(res))
	}
	for tenant, c := range codes {
		if len(c) > 1 {
			t.Errorf("%s: answers %v, want all admitted", tenant, c)
		}
	}
}

// A provider rpm shared by tenants: the line splits what the provider
// allows by the tenants' own limits, so a flood's backlog cannot take it
// all, and the provider's rpm holds in every sliding window. A polite
// tenant sending a request every 250 ms (well under half) gets all of them
// in, however many the flood has waiting (first come, first served, it
// would wait behind the flood's 40 clients, which rejoin the line the
// moment they are answered); two tenants both flooding split by weight,
// their own limits (each with more clients waiting than its share of a
// window: what frees at a window's edge is split among those waiting).
func TestQueueProviderFairShare(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of load")
	}
	const rpm, window = 40, 2 * time.Second
	cases := []struct {
		name                  string
		floodRPM, politeRPM   int
		floodN, politeN       int           // closed-loop clients
		politeEvery           time.Duration // or an open loop
		wantShare, floorShare float64       // of the admissions: weighted, and the least accepted
	}{
		{name: "polite under its share", floodRPM: 100_000, politeRPM: 100_000, floodN: 40, politeEvery: 250 * time.Millisecond},
		{name: "both flood, equal limits", floodRPM: 100_000, politeRPM: 100_000, floodN: 24, politeN: 24, wantShare: 0.5, floorShare: 0.4},
		// Weights are the tenants' own limits where below the
		// provider's: 20 and 30 of 40 split 16/24 (0.6); first come,
		// first served would give the flood's 36 clients its whole 20.
		{name: "both flood, by their limits", floodRPM: 20, politeRPM: 30, floodN: 36, politeN: 30, wantShare: 0.6, floorShare: 0.55},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envConfig{
				window:  window,
				tenants: []config.Tenant{tenantCfg("flood", tc.floodRPM, 1_000_000_000, 100), tenantCfg("polite", tc.politeRPM, 1_000_000_000, 100)},
				fake:    fakeupstream.Options{Latency: 5 * time.Millisecond, CompletionMin: 5, CompletionMax: 5},
				queue:   &config.Queue{InteractiveWait: 6 * time.Second, BatchWait: 6 * time.Second, MaxDepth: 1000},
				openAI:  func(u *config.Upstream) { u.RPM = rpm },
			})
			const dur = 3 * window
			start := time.Now()
			var polite []timed
			var wg sync.WaitGroup
			if tc.politeEvery > 0 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					polite = openLoop(t, e, "polite", dur, tc.politeEvery)
				}()
			}
			res := closedLoop(t, e, dur, map[string]int{"flood": tc.floodN, "polite": tc.politeN})
			wg.Wait()
			res = append(res, polite...)
			got := map[string]int{}
			sent := map[string]int{}
			// Admitted once the first window's burst left it and before
			// the clients stop sending: the line's split while both
			// tenants keep it full (the backlog drained after that is
			// split by who is left waiting).
			later := map[string]int{}
			var politeLat []time.Duration
			for _, r := range res {
				sent[r.tenant]++
				if r.status == http.StatusOK {
					got[r.tenant]++
					if r.at.After(start.Add(window+window/4)) && r.at.Before(start.Add(dur)) {
						later[r.tenant]++
					}
					if r.tenant == "polite" {
						politeLat = append(politeLat, r.took)
					}
				}
			}
			var evs []weighted
			for _, rec := range e.fake.Records() {
				evs = append(evs, weighted{at: rec.Received, w: 1})
			}
			// 52 clients under -race: the loopback hop to the provider
			// varies by more than elsewhere, and admissions packed at a
			// window's edge show it. Measured at the gateway (a probe
			// since removed), every window held 40 exactly while the
			// provider counted up to 54 in window-window/64 on a box
			// with two CPU hogs; the exact audit of queued admissions
			// at the provider is TestQueueHoldsRPMInEveryWindow's and
			// node's TestClusterProviderLimitQueued's.
			worst, _ := maxSliding(evs, window-window/16)
			share := float64(later["polite"]) / float64(max(1, later["polite"]+later["flood"]))
			t.Logf("admitted flood %d of %d, polite %d of %d (after the first window: share %.2f; polite p99 %v); fullest window at the provider %d of %d",
				got["flood"], sent["flood"], got["polite"], sent["polite"], share, pct(politeLat, 0.99), worst, rpm)
			if tc.politeEvery > 0 && float64(got["polite"]) < 0.9*float64(sent["polite"]) {
				t.Errorf("the polite tenant got %d of its %d requests in, under its share of the provider", got["polite"], sent["polite"])
			}
			if tc.wantShare > 0 && share < tc.floorShare {
				t.Errorf("the polite tenant got %.2f of the provider's requests, its weighted share is %.2f", share, tc.wantShare)
			}
			if worst > rpm {
				t.Errorf("%d requests reached the provider within a window, its rpm %d", worst, rpm)
			}
			if got["polite"]+got["flood"] < 2*rpm {
				t.Errorf("only %d admitted in 3 windows of %d", got["polite"]+got["flood"], rpm)
			}
		})
	}
}

// openLoop sends one request as tenant every every until dur has passed,
// whatever the answers, and waits for all of them.
func openLoop(t *testing.T, e *env, tenant string, dur, every time.Duration) []timed {
	t.Helper()
	var mu sync.Mutex
	var res []timed
	var wg sync.WaitGroup
	tick := time.NewTicker(every)
	defer tick.Stop()
	for end := time.Now().Add(dur); time.Now().Before(end); <-tick.C {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r, _, ok := sendTimed(t, e, tenant); ok {
				mu.Lock()
				res = append(res, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return res
}

// A request waiting for a provider's slot when a reload lifts the limit is
// decided on the new config at once: it does not wait on the old budget
// (given up by the reload) until the slot's holder ends.
func TestQueueReloadWhileWaitingForProvider(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of waiting: not in -short")
	}
	e := newEnv(t, envConfig{
		tenants: []config.Tenant{tenantCfg("acme", 1_000_000, 1_000_000_000, 100)},
		fake:    fakeupstream.Options{Latency: 1500 * time.Millisecond, CompletionMin: 5, CompletionMax: 5},
		queue:   &config.Queue{InteractiveWait: 5 * time.Second, BatchWait: 5 * time.Second, MaxDepth: 10},
		openAI:  func(u *config.Upstream) { u.Concurrency = 1 },
	})
	body := func(user string) []byte {
		b, _ := json.Marshal(map[string]any{"model": openAIModel, "user": user, "max_tokens": 5,
			"messages": []map[string]string{{"role": "user", "content": "hi"}}})
		return b
	}
	got := make(chan reply, 2)
	for _, user := range []string{"holder", "waiter"} {
		go func() {
			r, err := e.do(http.MethodPost, "/v1/chat/completions", keyOf("acme"), body(user), nil)
			if err != nil {
				t.Error(err)
			}
			got <- r
		}()
		if user == "holder" && !poll(settleWait, func() bool { return len(e.fake.Records()) == 1 }) {
			t.Fatal("the first call never reached the provider")
		}
	}
	var v struct {
		Upstreams []struct {
			Budget *struct {
				Queue struct {
					Interactive struct {
						Waiting int `json:"waiting"`
					} `json:"interactive"`
				} `json:"queue"`
			} `json:"budget"`
		} `json:"upstreams"`
	}
	if !poll(settleWait, func() bool {
		return json.Unmarshal(e.get("/upstreams", "").body, &v) == nil && len(v.Upstreams) > 0 &&
			v.Upstreams[0].Budget != nil && v.Upstreams[0].Budget.Queue.Interactive.Waiting == 1
	}) {
		t.Fatal("the second request never waited for the provider's slot")
	}
	reloadEnv(t, e, func(c *config.Config) {
		ups := slices.Clone(c.Upstreams)
		for i := range ups {
			ups[i].Concurrency = 0
		}
		c.Upstreams = ups
	})
	for range 2 {
		if r := <-got; r.status != http.StatusOK {
			t.Errorf("answer %s", r)
		}
	}
	var holder, waiter fakeupstream.Record
	for _, rec := range e.fake.Records() {
		if rec.User == "holder" {
			holder = rec
		} else {
			waiter = rec
		}
	}
	t.Logf("the waiter reached the provider %v after the holder, which ran %v", waiter.Received.Sub(holder.Received), holder.Finished.Sub(holder.Received))
	if !waiter.Received.Before(holder.Finished) {
		t.Errorf("the waiter reached the provider only once the holder ended (%v after it started): it waited on the budget the reload gave up",
			waiter.Received.Sub(holder.Received))
	}
}
