package router_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
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
	pct := func(ds []time.Duration, q float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[min(len(s)-1, int(q*float64(len(s))))]
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
	var v struct {
		Upstreams []struct {
			Name   string `json:"name"`
			Budget struct {
				Lease struct {
					SlotsInFlight int64 `json:"slots_in_flight"`
				} `json:"lease"`
			} `json:"budget"`
		} `json:"upstreams"`
	}
	if !poll(settleWait, func() bool {
		r := e.get("/upstreams", "")
		if json.Unmarshal(r.body, &v) != nil || len(v.Upstreams) == 0 {
			return false
		}
		return v.Upstreams[0].Budget.Lease.SlotsInFlight == 0
	}) {
		t.Errorf("the provider's slots in flight stay at %d after every call ended", v.Upstreams[0].Budget.Lease.SlotsInFlight)
	}
}

// Queued requests go in the instant a charge leaves the window, packed at
// its edge: counted at the provider, the tenant's rpm still holds in every
// sliding window (shortened only by the loopback delay, as every window
// audit here is), while the clients get almost no 429.
func TestQueueHoldsRPMInEveryWindow(t *testing.T) {
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
