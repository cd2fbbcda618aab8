package reserve

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// seed records n completions of c tokens for k.
func seed(e *Estimator, k Key, c, n int) {
	for range n {
		r := e.Estimate(k, 10, 0, true)
		e.Settle(r, Usage{Prompt: 10, Completion: c})
	}
}

func TestEstimate(t *testing.T) {
	e := NewEstimator(500)
	hist := Key{"acme", "gpt-4o"}
	seed(e, hist, 150, 1) // average exactly 150 -> expected ceil(225) = 225
	seed(e, Key{"acme", "tiny"}, 3, 1)

	tests := []struct {
		name      string
		k         Key
		prompt    int
		maxTokens int
		generates bool
		want      Reservation
	}{
		{"no history, uncapped", Key{"acme", "new-model"}, 100, 0, true, Reservation{Key{"acme", "new-model"}, 100, 500, 600}},
		{"no history, unknown tenant", Key{"nobody", "gpt-4o"}, 100, 0, true, Reservation{Key{"nobody", "gpt-4o"}, 100, 500, 600}},
		{"no history, max_tokens caps default", Key{"acme", "new-model"}, 100, 300, true, Reservation{Key{"acme", "new-model"}, 100, 300, 400}},
		{"no history, max_tokens above default", Key{"acme", "new-model"}, 100, 2000, true, Reservation{Key{"acme", "new-model"}, 100, 500, 600}},
		{"history, uncapped", hist, 100, 0, true, Reservation{hist, 100, 225, 325}},
		{"history, negative max_tokens means not given", hist, 100, -1, true, Reservation{hist, 100, 225, 325}},
		{"history, max_tokens above expected", hist, 100, 2000, true, Reservation{hist, 100, 225, 325}},
		{"history, max_tokens caps expected", hist, 100, 200, true, Reservation{hist, 100, 200, 300}},
		{"history, max_tokens 1", hist, 100, 1, true, Reservation{hist, 100, 1, 101}},
		{"history rounds up", Key{"acme", "tiny"}, 7, 0, true, Reservation{Key{"acme", "tiny"}, 7, 5, 12}}, // ceil(4.5)
		{"embeddings", hist, 100, 2000, false, Reservation{hist, 100, 0, 100}},
		{"embeddings, no max_tokens", Key{"acme", "text-embedding-3-small"}, 8000, 0, false, Reservation{Key{"acme", "text-embedding-3-small"}, 8000, 0, 8000}},
		{"empty prompt", hist, 0, 0, true, Reservation{hist, 0, 225, 225}},
		{"negative prompt clamps", hist, -5, 0, true, Reservation{hist, 0, 225, 225}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := e.Estimate(tc.k, tc.prompt, tc.maxTokens, tc.generates); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}

	// A defaultCompletion below 1 still reserves one token, so that
	// Completion > 0 identifies generating reservations.
	if r := NewEstimator(0).Estimate(hist, 10, 0, true); r.Completion != 1 || r.Total != 11 {
		t.Errorf("NewEstimator(0): %+v", r)
	}
}

func TestSettle(t *testing.T) {
	e := NewEstimator(500)
	k := Key{"acme", "gpt-4o"}

	r := e.Estimate(k, 100, 2000, true) // 100 + 500
	if d := e.Settle(r, Usage{Prompt: 100, Completion: 150}); d != -350 {
		t.Errorf("credit: delta %d, want -350", d)
	}
	if avg, ok := e.Average(k); !ok || avg != 150 {
		t.Errorf("after first settle: avg %v ok %v, want 150 true", avg, ok)
	}

	r = e.Estimate(k, 100, 2000, true) // 100 + 225
	if r.Total != 325 {
		t.Fatalf("estimate after history: %+v", r)
	}
	if d := e.Settle(r, Usage{Prompt: 110, Completion: 400}); d != 185 {
		t.Errorf("debit: delta %d, want 185", d)
	}
	if avg, _ := e.Average(k); math.Abs(avg-200) > 1e-9 { // 150 + 0.2*(400-150)
		t.Errorf("EWMA: avg %v, want 200", avg)
	}

	// Exact usage settles to zero.
	r = e.Estimate(k, 50, 0, true)
	if d := e.Settle(r, Usage{Prompt: 50, Completion: r.Completion}); d != 0 {
		t.Errorf("exact: delta %d", d)
	}

	// Embeddings: the delta is computed but nothing is recorded.
	ek := Key{"acme", "text-embedding-3-small"}
	r = e.Estimate(ek, 1000, 0, false)
	if d := e.Settle(r, Usage{Prompt: 990}); d != -10 {
		t.Errorf("embeddings: delta %d, want -10", d)
	}
	if _, ok := e.Average(ek); ok {
		t.Errorf("embeddings recorded a completion history")
	}

	// A zero Usage (failed call) credits everything back and records nothing.
	before, _ := e.Average(k)
	r = e.Estimate(k, 100, 0, true)
	if d := e.Settle(r, Usage{}); d != -r.Total {
		t.Errorf("failed call: delta %d, want %d", d, -r.Total)
	}
	if after, _ := e.Average(k); after != before {
		t.Errorf("failed call changed the average: %v -> %v", before, after)
	}

	// Histories are per (tenant, model).
	if _, ok := e.Average(Key{"other", "gpt-4o"}); ok {
		t.Errorf("history leaked to another tenant")
	}
	if _, ok := e.Average(Key{"acme", "gpt-4o-mini"}); ok {
		t.Errorf("history leaked to another model")
	}

	// Negative counts are treated as zero.
	r = Reservation{Key: k, Prompt: 10, Completion: 10, Total: 20}
	if d := e.Settle(r, Usage{Prompt: -5, Completion: 30}); d != 10 {
		t.Errorf("negative prompt: delta %d, want 10", d)
	}
}

// The average must follow a change in completion lengths within tens of
// requests.
func TestAdapts(t *testing.T) {
	e := NewEstimator(500)
	k := Key{"acme", "gpt-4o"}
	seed(e, k, 150, 50)
	seed(e, k, 600, 20)
	if avg, _ := e.Average(k); avg < 0.95*600 {
		t.Errorf("after 20 requests at 600: avg %.1f, want >= 570", avg)
	}
	seed(e, k, 100, 20)
	if avg, _ := e.Average(k); avg > 1.05*100+5 {
		t.Errorf("after 20 requests at 100: avg %.1f", avg)
	}
}

// simulateWindow runs one rate-limit window: one request arrives per step,
// each takes latency steps, and is admitted iff the window's usage (settled
// actuals + in-flight reservations) plus its reservation fits the budget;
// rejected requests are dropped. It returns the actual tokens of admitted
// requests and the number admitted.
func simulateWindow(budget, steps, latency int, reserve func(prompt int) Reservation, settle func(Reservation, Usage)) (used, admitted int) {
	type flight struct {
		done int
		r    Reservation
		u    Usage
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var q []flight
	window := 0 // settled actuals + in-flight reservations
	land := func(f flight) {
		window += f.u.Prompt + f.u.Completion - f.r.Total
		used += f.u.Prompt + f.u.Completion
		settle(f.r, f.u)
	}
	for step := range steps {
		for len(q) > 0 && q[0].done <= step {
			land(q[0])
			q = q[1:]
		}
		u := Usage{Prompt: 80 + rng.IntN(41), Completion: 120 + rng.IntN(61)} // ~100 + ~150
		r := reserve(u.Prompt)
		if window+r.Total <= budget {
			window += r.Total
			admitted++
			q = append(q, flight{step + latency, r, u})
		}
	}
	for _, f := range q { // the window closes; admitted requests still finish
		land(f)
	}
	return used, admitted
}

// A tenant whose requests ask for max_tokens 2000 but get ~150 must be able
// to use >= 90% of its tokens-per-minute budget. Demand is 150% of the
// budget; the longer requests take, the more is reserved in flight, which is
// what reserving max_tokens upfront wastes.
func TestConvergenceTPM(t *testing.T) {
	const (
		budget = 100_000 // TPM
		steps  = 600     // 100 ms steps in a minute; demand 600 x ~250 = 150k
		maxTok = 2000
	)
	for _, tc := range []struct {
		latency     int  // steps per request
		maxTokWaste bool // whether reserving max_tokens must fall below 90%
	}{
		{20, false}, // 2 s: ~20 in flight
		{80, true},  // 8 s: ~80 in flight
		{150, true}, // 15 s: ~150 in flight
	} {
		t.Run(fmt.Sprintf("latency=%dms", tc.latency*100), func(t *testing.T) {
			k := Key{"acme", "gpt-4o"}
			e := NewEstimator(500)
			used, n := simulateWindow(budget, steps, tc.latency,
				func(p int) Reservation { return e.Estimate(k, p, maxTok, true) },
				func(r Reservation, u Usage) { e.Settle(r, u) })
			util := float64(used) / budget
			if avg, _ := e.Average(k); avg < 120 || avg > 180 {
				t.Errorf("average %.1f not near 150", avg)
			}

			// Baseline: reserve max_tokens upfront.
			usedMax, nMax := simulateWindow(budget, steps, tc.latency,
				func(p int) Reservation { return Reservation{Prompt: p, Completion: maxTok, Total: p + maxTok} },
				func(Reservation, Usage) {})
			utilMax := float64(usedMax) / budget
			t.Logf("estimator: %d requests, %.1f%% of TPM; max_tokens: %d requests, %.1f%% of TPM",
				n, 100*util, nMax, 100*utilMax)

			if util < 0.90 {
				t.Errorf("estimator utilization %.1f%%, want >= 90%%", 100*util)
			}
			if tc.maxTokWaste && utilMax >= 0.90 {
				t.Errorf("baseline reached %.1f%%: the simulation does not exercise in-flight reservations", 100*utilMax)
			}
		})
	}
}

func TestMemoryBoundPerTenant(t *testing.T) {
	e := NewEstimator(500)
	// One tenant sends 10,000 distinct model names.
	for i := range 10_000 {
		seed(e, Key{"acme", fmt.Sprintf("model-%d", i)}, 100, 1)
	}
	if tn, m := e.Len(); tn != 1 || m != DefaultModelsPerTenant {
		t.Fatalf("Len = %d tenants, %d models; want 1, %d", tn, m, DefaultModelsPerTenant)
	}
	// Models past the cap share the tenant aggregate, which has seen every
	// completion; stored models keep their own history.
	seed(e, Key{"acme", "model-9999"}, 1000, 5)
	aggAvg, ok := e.Average(Key{"acme", "never-seen"})
	if !ok || aggAvg <= 100 {
		t.Errorf("overflow model: avg %v ok %v, want the tenant aggregate (> 100)", aggAvg, ok)
	}
	if avg, ok := e.Average(Key{"acme", "model-0"}); !ok || avg != 100 {
		t.Errorf("stored model: avg %v ok %v, want 100", avg, ok)
	}
	if r := e.Estimate(Key{"acme", "never-seen"}, 0, 0, true); r.Completion != int(math.Ceil(1.5*aggAvg)) {
		t.Errorf("overflow estimate %+v, want from aggregate %.1f", r, aggAvg)
	}
	// Over-long names are never stored, even with room.
	long := Key{"fresh", strings.Repeat("x", MaxModelNameLen+1)}
	seed(e, long, 300, 1)
	if _, m := e.Len(); m != DefaultModelsPerTenant {
		t.Errorf("long model name stored")
	}
	if avg, ok := e.Average(long); !ok || avg != 300 {
		t.Errorf("long model name: avg %v ok %v, want tenant aggregate 300", avg, ok)
	}
}

func TestMemoryBoundGlobal(t *testing.T) {
	e := NewEstimatorLimits(500, Limits{ModelsPerTenant: 4, MaxModels: 100, MaxTenants: 50})
	for i := range 200 {
		for j := range 10 {
			seed(e, Key{fmt.Sprintf("tenant-%d", i), fmt.Sprintf("m-%d", j)}, 100, 1)
		}
	}
	tn, m := e.Len()
	if tn != 50 || m != 100 {
		t.Fatalf("Len = %d tenants, %d models; want 50, 100", tn, m)
	}
	// Tenant past the tenant cap: no history, default estimate.
	if r := e.Estimate(Key{"tenant-199", "m-0"}, 0, 0, true); r.Completion != 500 {
		t.Errorf("tenant past cap: %+v", r)
	}
	// Tenant within the tenant cap but past the global model cap: aggregate.
	if avg, ok := e.Average(Key{"tenant-40", "m-0"}); !ok || avg != 100 {
		t.Errorf("tenant past model cap: avg %v ok %v", avg, ok)
	}
}

// With the default caps full of maximal names the estimator stays small.
func TestMemoryBoundDefaultsHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	e := NewEstimator(500)
	pad := strings.Repeat("m", MaxModelNameLen-12)
	for i := range DefaultMaxModels + 1000 {
		k := Key{fmt.Sprintf("tenant-%06d", i/DefaultModelsPerTenant*2), fmt.Sprintf("%s%012d", pad, i)}
		e.Settle(Reservation{Key: k, Completion: 1, Total: 1}, Usage{Completion: 100})
	}
	for i := range DefaultMaxTenants + 1000 { // fill the tenant cap too
		e.Settle(Reservation{Key: Key{fmt.Sprintf("t%063d", i), "m"}, Completion: 1, Total: 1}, Usage{Completion: 100})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	tn, m := e.Len()
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d tenants, %d models: heap +%.1f MiB", tn, m, float64(heap)/(1<<20))
	if tn != DefaultMaxTenants || m != DefaultMaxModels {
		t.Errorf("Len = %d, %d", tn, m)
	}
	if heap > 32<<20 {
		t.Errorf("heap grew %d MiB", heap>>20)
	}
	runtime.KeepAlive(e)
}

func TestEstimateNoAlloc(t *testing.T) {
	e := NewEstimator(500)
	k := Key{"acme", "gpt-4o"}
	seed(e, k, 150, 3)
	miss := Key{"acme", "unknown"}
	if n := testing.AllocsPerRun(1000, func() {
		e.Estimate(k, 1000, 2000, true)
		e.Estimate(miss, 1000, 2000, true)
		e.Average(k)
	}); n != 0 {
		t.Errorf("Estimate allocates %v per run", n)
	}
	r := e.Estimate(k, 1000, 2000, true)
	if n := testing.AllocsPerRun(1000, func() { e.Settle(r, Usage{1000, 150}) }); n != 0 {
		t.Errorf("Settle on an existing history allocates %v per run", n)
	}
}

func TestConcurrent(t *testing.T) {
	e := NewEstimatorLimits(500, Limits{ModelsPerTenant: 8, MaxModels: 40})
	const goroutines, iters = 8, 2000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range iters {
				k := Key{fmt.Sprintf("t%d", rng.IntN(10)), fmt.Sprintf("m%d", rng.IntN(12))}
				if i%3 == 0 {
					k = Key{"shared", "gpt-4o"} // one hot key
				}
				r := e.Estimate(k, 100, 2000, true)
				if r.Completion < 1 || r.Completion > 2000 || r.Total != r.Prompt+r.Completion {
					t.Errorf("bad reservation %+v", r)
					return
				}
				want := 100 + 150 - r.Total
				if d := e.Settle(r, Usage{100, 150}); d != want {
					t.Errorf("delta %d, want %d", d, want)
					return
				}
				e.Average(k)
			}
		})
	}
	wg.Wait()
	tn, m := e.Len()
	if tn != 11 || m > 40 {
		t.Errorf("Len = %d tenants, %d models", tn, m)
	}
	// Every sample was 150, so every history must be exactly 150.
	if avg, ok := e.Average(Key{"shared", "gpt-4o"}); !ok || math.Abs(avg-150) > 1e-9 {
		t.Errorf("hot key avg %v ok %v", avg, ok)
	}
	for i := range 10 {
		for j := range 12 {
			if avg, ok := e.Average(Key{fmt.Sprintf("t%d", i), fmt.Sprintf("m%d", j)}); ok && math.Abs(avg-150) > 1e-9 {
				t.Errorf("t%d/m%d avg %v", i, j, avg)
			}
		}
	}
}

// Many goroutines race to create the same and different tenants and
// models at the caps; afterwards: counters == what is stored, within every
// bound, and every history got every sample (no split history).
func TestConcurrentAddsKeepBounds(t *testing.T) {
	for round := range 200 {
		lim := Limits{ModelsPerTenant: 3, MaxModels: 7, MaxTenants: 4}
		e := NewEstimatorLimits(500, lim)
		const G = 8
		var start, wg sync.WaitGroup
		start.Add(1)
		for g := range G {
			wg.Go(func() {
				start.Wait()
				rng := rand.New(rand.NewPCG(uint64(round), uint64(g)))
				for range 40 {
					k := Key{fmt.Sprintf("t%d", rng.IntN(6)), fmt.Sprintf("m%d", rng.IntN(5))}
					e.Settle(Reservation{Key: k, Completion: 1, Total: 1}, Usage{Completion: 150})
					e.Average(k)
				}
			})
		}
		start.Done()
		wg.Wait()
		tenants, models := 0, 0
		e.hists.Range(func(key, v any) bool {
			tenants++
			nm := v.(*tenantHist).numModels()
			if nm > lim.ModelsPerTenant {
				t.Errorf("tenant %v has %d models", key, nm)
			}
			models += nm
			return true
		})
		tn, mn := e.Len()
		if tn != tenants || mn != models || tenants > lim.MaxTenants || models > lim.MaxModels {
			t.Fatalf("round %d: Len %d,%d stored %d,%d", round, tn, mn, tenants, models)
		}
	}
}

// Every goroutine records its first sample of one new (tenant, model) at
// once, with different values: the one stored history (and the aggregate)
// is the EWMA of all of them in some order, so none went to a lost copy.
func TestConcurrentFirstSamplesOneHistory(t *testing.T) {
	xs := []float64{1, 10, 100, 1000}
	want := map[float64]bool{}
	var perm func(p []float64, k int)
	perm = func(p []float64, k int) {
		if k == len(p) {
			var a ewma
			for _, x := range p {
				a.add(x)
			}
			v, _ := a.load()
			want[v] = true
			return
		}
		for i := k; i < len(p); i++ {
			p[k], p[i] = p[i], p[k]
			perm(p, k+1)
			p[k], p[i] = p[i], p[k]
		}
	}
	perm(append([]float64(nil), xs...), 0)
	lost := 0
	for round := range 2000 {
		maxT := 0
		if round%2 == 1 {
			maxT = 1 // at the tenant cap: a sample may be lost, not split
		}
		e := NewEstimatorLimits(500, Limits{MaxTenants: maxT})
		k := Key{"t", "m"}
		var start, wg sync.WaitGroup
		start.Add(1)
		for _, x := range xs {
			wg.Go(func() { start.Wait(); e.record(k, x) })
		}
		start.Done()
		wg.Wait()
		m, _ := e.hist("t").model("m").load()
		g, _ := e.hist("t").agg.load()
		if !want[m] || !want[g] {
			if maxT == 0 {
				t.Fatalf("round %d: model %v agg %v: not all samples in one history", round, m, g)
			}
			lost++
		}
		if tn, mn := e.Len(); tn != 1 || mn != 1 {
			t.Fatalf("round %d: Len %d,%d", round, tn, mn)
		}
	}
	t.Logf("rounds at the tenant cap with a lost first sample: %d of 1000", lost)
}

// Past the bounds (a model over its tenant's cap, a name too long, a
// tenant past the tenants' cap), as TestEstimateNoAlloc within them.
func TestEstimateNoAllocPastBounds(t *testing.T) {
	e := NewEstimatorLimits(500, Limits{ModelsPerTenant: 1, MaxTenants: 1})
	seed(e, Key{"a", "m"}, 100, 2)
	seed(e, Key{"a", "other"}, 100, 2)
	for _, k := range []Key{{"a", "other"}, {"a", strings.Repeat("x", 200)}, {"past-cap", "m"}} {
		r := e.Estimate(k, 10, 0, true)
		if n := testing.AllocsPerRun(1000, func() {
			e.Estimate(k, 10, 0, true)
			e.Settle(r, Usage{10, 100})
		}); n != 0 {
			t.Errorf("%+v: %v allocations a request", k, n)
		}
	}
}

// Keys stored are copies, not the caller's buffer.
func TestHistoryKeysCopied(t *testing.T) {
	e := NewEstimator(500)
	big := strings.Repeat("z", 1<<20)
	kt, km := big[:8], big[8:16]
	e.Settle(Reservation{Key: Key{kt, km}, Completion: 1, Total: 1}, Usage{Completion: 5})
	e.hists.Range(func(key, v any) bool {
		s := key.(string)
		if sameData(s, kt) {
			t.Errorf("tenant key aliases the request buffer")
		}
		for name := range *v.(*tenantHist).models.Load() {
			if sameData(name, km) {
				t.Errorf("model key aliases the request buffer")
			}
		}
		return true
	})
}

func sameData(a, b string) bool {
	return len(a) > 0 && len(b) > 0 && unsafe.StringData(a) == unsafe.StringData(b)
}
