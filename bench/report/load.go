package main

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/internal/audit"
)

// bounds on every load loop
const (
	maxInFlight = 256
	reqTimeout  = 10 * time.Second
)

var client = &fasthttp.Client{MaxConnsPerHost: 1024, ReadTimeout: reqTimeout, WriteTimeout: reqTimeout,
	MaxIdleConnDuration: time.Minute, NoDefaultUserAgentHeader: true}

// post sends tenant's chat completion to addr; it returns the status (0:
// no answer).
func post(addr, tenant string) int {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + addr + "/v1/chat/completions")
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("Authorization", "Bearer sk-"+tenant)
	req.SetBodyString(`{"model":"` + model + `","user":"` + tenant + `","max_tokens":20,"messages":[{"role":"user","content":"Say hello."}]}`)
	if err := client.Do(req, resp); err != nil { // bounded by the client's read and write timeouts
		return 0
	}
	return resp.StatusCode()
}

// openLoop sends rate requests a second for d, round robin over sys, each
// sent at its time whatever the answers before (a slow answer does not
// lower the load); it returns the latencies, from sending to the whole
// answer, of those answered 200, sorted, and how many were not. (Measured
// from the send, not the due time: the generator's own lateness, a
// sleep's overshoot on a busy 2-core machine, is not the target's.)
func openLoop(sys *system, tenant string, rate int, d time.Duration) ([]time.Duration, int) {
	n := int(d.Seconds() * float64(rate))
	interval := time.Second / time.Duration(rate)
	durs := make([]time.Duration, 0, n)
	var mu sync.Mutex
	var failed atomic.Int64
	sem := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval))) // pacing
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			sent := time.Now()
			if post(sys.pick(i), tenant) != 200 {
				failed.Add(1)
				return
			}
			took := time.Since(sent)
			mu.Lock()
			durs = append(durs, took)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(durs)
	return durs, int(failed.Load())
}

// saturate sends from workers closed-loop clients for d and returns the
// answered rate.
func saturate(sys *system, tenant string, workers int, d time.Duration) float64 {
	var done atomic.Int64
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; time.Now().Before(end); i += workers {
				if post(sys.pick(i), tenant) == 200 {
					done.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return float64(done.Load()) / d.Seconds()
}

// pct is the nearest-rank percentile q of sorted d.
func pct(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[max(0, min(len(d)-1, int(math.Ceil(q*float64(len(d))))-1))]
}

// latencyRow is one target's figures.
type latencyRow struct {
	name     string
	p50, p99 map[int]time.Duration // by offered rate
	failed   int
	sat      float64
}

// latencyPhase measures every target at each rate (interleaved: each rate
// runs on every target before the next rate) and saturated.
func latencyPhase(fake *fakeupstream.Server, upAddr, redisAddr string, rates []int, step, satFor time.Duration) ([]latencyRow, error) {
	names := []string{"direct", "floor", "ringgate", "redis-per-request", "local-limits"}
	systems := make([]*system, len(names))
	var all []*gateway
	defer func() {
		for _, g := range all {
			g.stop(false)
		}
	}()
	for i, name := range names {
		s := &system{}
		switch name {
		case "direct":
			s.set([]string{upAddr})
		default:
			n := 3
			if name == "floor" {
				n = 1
			}
			b := &builder{sys: name, upAddr: upAddr, redisAddr: redisAddr, secret: secret()}
			gs, err := b.start(n)
			if err != nil {
				return nil, fmt.Errorf("start %s: %w", name, err)
			}
			all = append(all, gs...)
			s.set(addrsOf(gs))
		}
		systems[i] = s
		openLoop(s, "t0", 200, 300*time.Millisecond) // warm: connections, encodings
	}
	rows := make([]latencyRow, len(names))
	for i := range rows {
		rows[i] = latencyRow{name: names[i], p50: map[int]time.Duration{}, p99: map[int]time.Duration{}}
	}
	for _, rate := range rates {
		for i, s := range systems {
			durs, failed := openLoop(s, "t0", rate, step)
			rows[i].p50[rate], rows[i].p99[rate] = pct(durs, 0.50), pct(durs, 0.99)
			rows[i].failed += failed
			fake.Reset()
		}
	}
	for i, s := range systems {
		rows[i].sat = saturate(s, "t0", 16, satFor)
		fake.Reset()
	}
	return rows, nil
}

// accuracy is one limiting system's run through the changes.
type accuracy struct {
	name   string
	events []event
	start  time.Time
	length time.Duration // of the load
	// arrivals at the provider, by tenant; worst sliding window of each
	arrivals [][]time.Time
	worst    []int
	sentAll  int // the fullest window of what the gateways sent the provider, all tenants
	admitted int
	answers  map[int]int
	breaches int64
	// restartTook is how long the rolling restart took, all three.
	restartTook time.Duration
	// utilMean and utilLow are what the tenants' whole tumbling windows
	// after the first held at the provider against the limit: the mean,
	// and the emptiest window (what a change cost the tenants).
	utilMean, utilLow float64
}

type event struct {
	at   time.Duration
	what string
}

// accuracyRun drives every tenant at twice its limit through system sys
// (3 gateways) for d, adding a fourth at d×3/20, draining one at d×6/20,
// restarting each of the three left in turn from d×9/20 (drained, then
// started again under its name: a StatefulSet's rolling restart) and
// killing one (no drain) at d×15/20.
func accuracyRun(sys string, fake *fakeupstream.Server, upAddr, redisAddr string, d time.Duration) (accuracy, error) {
	b := &builder{sys: sys, upAddr: upAddr, redisAddr: redisAddr, limits: true, secret: secret()}
	gs, err := b.start(3)
	if err != nil {
		return accuracy{}, err
	}
	defer func() {
		for _, g := range gs {
			g.stop(false)
		}
	}()
	s := &system{}
	s.set(addrsOf(gs))
	fake.Reset()
	a := accuracy{name: sys, answers: map[int]int{}, start: time.Now(), length: d}
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	interval := window / (2 * tenantLimit)
	for k := range tenants {
		tenant := fmt.Sprintf("t%d", k)
		wg.Go(func() {
			sem := make(chan struct{}, maxInFlight)
			var inflight sync.WaitGroup
			defer inflight.Wait()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Until(a.start.Add(time.Duration(i)*interval + time.Duration(k)*interval/tenants))): // pacing
				}
				sem <- struct{}{}
				inflight.Go(func() {
					defer func() { <-sem }()
					code := post(s.pick(i+k), tenant)
					mu.Lock()
					a.answers[code]++
					mu.Unlock()
				})
			}
		})
	}
	at := func(frac float64) time.Duration { return time.Duration(float64(d) * frac) }
	sleepUntil := func(t time.Duration) { time.Sleep(time.Until(a.start.Add(t))) } // pacing
	sleepUntil(at(3.0 / 20))
	a.events = append(a.events, event{time.Since(a.start), "scale-up"}) // started now; it serves once ready
	g, err := b.add()
	if err == nil {
		err = waitReady([]*gateway{g})
	}
	if err != nil {
		close(stop)
		wg.Wait()
		return a, err
	}
	gs = append(gs, g)
	s.set(addrsOf(gs))
	sleepUntil(at(6.0 / 20))
	drained := gs[0]
	gs = gs[1:]
	s.set(addrsOf(gs)) // the balancer sees /readyz 503 at once
	a.events = append(a.events, event{time.Since(a.start), "drain"})
	go drained.stop(true)
	sleepUntil(at(9.0 / 20))
	a.events = append(a.events, event{time.Since(a.start), "rolling restart"})
	for i := range gs {
		old := gs[i]
		s.set(addrsOf(slices.Delete(slices.Clone(gs), i, i+1)))
		ng, err := b.restart(old)
		if err != nil {
			close(stop)
			wg.Wait()
			return a, fmt.Errorf("restart %s: %w", old.name, err)
		}
		gs[i] = ng
		s.set(addrsOf(gs))
	}
	a.restartTook = time.Since(a.start) - a.events[len(a.events)-1].at
	sleepUntil(at(15.0 / 20))
	killed := gs[0]
	gs = gs[1:]
	// kill -9: no drain, the calls in flight on it cut. The balancer
	// sends no new request to it (HAProxy retries a refused connection
	// on another server).
	s.set(addrsOf(gs))
	a.events = append(a.events, event{time.Since(a.start), "kill -9"})
	killed.stop(false) // returns once its server has closed, up to 2 s later
	sleepUntil(d)
	// The events may run past d on a slow machine (a restart waits for
	// its node): the figures are over the load's real length.
	a.length = max(d, time.Since(a.start))
	close(stop)
	wg.Wait()

	for k := range tenants {
		var ts []time.Time
		for _, r := range fake.Records() {
			if r.User == fmt.Sprintf("t%d", k) && !r.RateLimited {
				ts = append(ts, r.Received)
			}
		}
		slices.SortFunc(ts, func(x, y time.Time) int { return x.Compare(y) })
		a.arrivals = append(a.arrivals, ts)
		a.worst = append(a.worst, audit.MaxIn(ts, window-window/64).Count)
		a.admitted += len(ts)
	}
	a.utilMean, a.utilLow = utilisation(a.arrivals, a.start, a.length)
	var all []time.Time
	for _, r := range fake.Records() {
		all = append(all, r.Received)
	}
	slices.SortFunc(all, func(x, y time.Time) int { return x.Compare(y) })
	a.sentAll = audit.MaxIn(all, window-window/64).Count
	a.breaches = fake.Stats().Breaches
	return a, nil
}

// secret is a fresh cluster secret.
func secret() []byte {
	b := make([]byte, 32)
	for i := range b {
		b[i] = byte(time.Now().UnixNano() >> (i % 8))
	}
	return b
}

// utilisation is what each tenant's whole tumbling windows after the first
// (which starts empty) held, as a fraction of the limit: the mean over
// tenants and windows, and the lowest one.
func utilisation(arrivals [][]time.Time, start time.Time, d time.Duration) (mean, low float64) {
	var sum float64
	var n int
	for _, ts := range arrivals {
		for from := window; from+window <= d; from += window {
			u := float64(audit.CountIn(ts, start.Add(from), start.Add(from+window))) / tenantLimit
			if n == 0 || u < low {
				low = u
			}
			sum += u
			n++
		}
	}
	if n == 0 {
		return 0, 0
	}
	return sum / float64(n), low
}
