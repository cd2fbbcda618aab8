// Package loadgen is `ringgate load`: a small open-loop load of chat
// completions against a ringgate front (a node or the load balancer before
// the nodes), one stream of requests per tenant key at a fixed rate, with
// a line a second of what came back. The local cluster recipe (make
// cluster, scale-up, scale-down) runs it so that an operator watches
// tenants stay within their limits while nodes come and go.
//
// Its output explains itself: a legend first (lines starting with #),
// then a table of what came back each second, all keys together, and,
// with -window, a block per window of each key's 200s and the node that
// enforced its limits, which shows a tenant moving to another node.
//
// It knows nothing of ringgate's insides: only the client API and its
// headers (x-ringgate-node, x-ringgate-queued-ms).
package loadgen

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config is a load.
type Config struct {
	URL      string        // the front: http://host:port
	Keys     []string      // one stream of requests per tenant key
	Rate     float64       // requests a second per key
	Duration time.Duration // how long; bounded
	Model    string
	Timeout  time.Duration // one request's
	// Window, if > 0, is the tenants' limit window: every Window, a block
	// of each key's 200s in it and the nodes that enforced its limits.
	Window time.Duration
}

// maxInFlight bounds the requests a key has in flight: past it a due
// request is skipped and counted as such, not queued.
const maxInFlight = 64

// Run parses args (flags) and runs the load until ctx ends or the duration
// passes, writing a legend, a line a second and a total to out.
func Run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(out)
	c := Config{}
	fs.StringVar(&c.URL, "url", "http://127.0.0.1:8000", "the ringgate front to send to")
	keys := fs.String("keys", "sk-acme-1,sk-globex-1", "comma-separated tenant keys, one stream of requests each")
	fs.Float64Var(&c.Rate, "rate", 20, "requests a second per key")
	fs.DurationVar(&c.Duration, "duration", 10*time.Minute, "how long to run (at most 24h)")
	fs.StringVar(&c.Model, "model", "gpt-4o-mini", "the model asked for")
	fs.DurationVar(&c.Timeout, "timeout", 30*time.Second, "one request's timeout")
	fs.DurationVar(&c.Window, "window", 0, "the tenants' limit window (limits.window): every window, each key's 200s in it and the node that enforced it; 0: none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, k := range strings.Split(*keys, ",") {
		if k = strings.TrimSpace(k); k != "" {
			c.Keys = append(c.Keys, k)
		}
	}
	switch {
	case len(c.Keys) == 0:
		return errors.New("load: -keys names no key")
	case c.Rate < 0.01 || c.Rate > 10000:
		return fmt.Errorf("load: -rate must be in [0.01, 10000] (got %v)", c.Rate)
	case c.Duration <= 0 || c.Duration > 24*time.Hour:
		return fmt.Errorf("load: -duration must be in (0, 24h] (got %v)", c.Duration)
	case c.Window != 0 && (c.Window < time.Second || c.Window > time.Hour):
		return fmt.Errorf("load: -window must be 0 or in [1s, 1h] (got %v)", c.Window)
	}
	return c.Run(ctx, out)
}

// counts are one key's answers by status (0: no answer; -1: skipped, too
// many in flight).
type counts map[int]int

// answer is what came back for one request.
type answer struct {
	status int           // 0: no answer; -1: skipped, too many in flight
	node   string        // x-ringgate-node: the node that enforced the tenant's limits
	queued bool          // it carried x-ringgate-queued-ms: it waited for room
	waited time.Duration // how long, then
}

// tally is what came back in one second, all keys together.
type tally struct {
	sent, ok, refused, waited, failed, skipped int
	longest                                    time.Duration // longest wait among them
	other                                      counts        // any other status
}

func (s *tally) add(a answer) {
	switch a.status {
	case http.StatusOK:
		s.ok++
	case http.StatusTooManyRequests:
		s.refused++
	case 0:
		s.failed++
	case -1:
		s.skipped++
	default:
		if s.other == nil {
			s.other = counts{}
		}
		s.other[a.status]++
	}
	if a.queued {
		s.waited++
		s.longest = max(s.longest, a.waited)
	}
}

// keyWindow is one key's 200s in the current window and the nodes that
// enforced its limits, in the order they were first seen.
type keyWindow struct {
	ok    int
	nodes []string
}

// Run runs the load.
func (c Config) Run(ctx context.Context, out io.Writer) error {
	// Requests are sent until the duration passes, and those in flight
	// then are waited for (each bounded by Timeout); only ctx (an
	// interrupt) cuts them off.
	sendCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, c.Duration)
	defer cancel()
	client := &http.Client{Timeout: c.Timeout, Transport: &http.Transport{MaxIdleConnsPerHost: maxInFlight}}
	defer client.CloseIdleConnections()
	var (
		mu     sync.Mutex
		second tally
		window = make([]keyWindow, len(c.Keys))
		total  = make([]counts, len(c.Keys))
	)
	for i := range c.Keys {
		total[i] = counts{}
	}
	note := func(i int, a answer) {
		mu.Lock()
		defer mu.Unlock()
		second.add(a)
		total[i][a.status]++
		if a.status == http.StatusOK {
			window[i].ok++
		}
		if w := &window[i]; a.node != "" && !slices.Contains(w.nodes, a.node) {
			w.nodes = append(w.nodes, a.node)
		}
	}
	sent := func() {
		mu.Lock()
		second.sent++
		mu.Unlock()
	}
	body := fmt.Sprintf(`{"model":%q,"max_tokens":16,"messages":[{"role":"user","content":"Say hello from the load generator."}]}`, c.Model)
	c.legend(out)
	fmt.Fprintln(out, header)
	var wg sync.WaitGroup
	for i, key := range c.Keys {
		wg.Go(func() {
			sem := make(chan struct{}, maxInFlight)
			var inflight sync.WaitGroup
			defer inflight.Wait()
			tick := time.NewTicker(time.Duration(float64(time.Second) / c.Rate))
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				select {
				case sem <- struct{}{}:
				default:
					note(i, answer{status: -1})
					continue
				}
				sent()
				inflight.Go(func() {
					defer func() { <-sem }()
					note(i, c.post(sendCtx, client, key, body))
				})
			}
		})
	}
	start := time.Now()
	windowStart := time.Duration(0)
	report := time.NewTicker(time.Second)
	defer report.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-report.C:
		}
		mu.Lock()
		at := time.Since(start)
		fmt.Fprintln(out, row(at, second))
		second = tally{}
		if c.Window > 0 && (at-windowStart >= c.Window-100*time.Millisecond || done) {
			c.windowBlock(out, windowStart, at, window)
			if !done {
				fmt.Fprintln(out, header)
			}
			windowStart = at
			for i := range window {
				window[i] = keyWindow{}
			}
		}
		mu.Unlock()
	}
	wg.Wait()
	fmt.Fprintf(out, "total  %s\n", c.line(total))
	return nil
}

// header names the columns of the line a second (legend explains them).
const header = "   time   sent    200    429 waited longest failed skipped  other"

// row is one second's line under header.
func row(at time.Duration, s tally) string {
	longest := "-"
	if s.waited > 0 {
		longest = fmt.Sprintf("%.1fs", s.longest.Seconds())
	}
	other := "-"
	if len(s.other) > 0 {
		var parts []string
		for _, status := range slices.Sorted(maps.Keys(s.other)) {
			parts = append(parts, fmt.Sprintf("%d:%d", status, s.other[status]))
		}
		other = strings.Join(parts, " ")
	}
	return fmt.Sprintf("%6.1fs %6d %6d %6d %6d %7s %6d %7d  %s",
		at.Seconds(), s.sent, s.ok, s.refused, s.waited, longest, s.failed, s.skipped, other)
}

// legend says what the load does and what each number means.
func (c Config) legend(out io.Writer) {
	lines := []string{
		fmt.Sprintf("ringgate load: %d keys, %g requests a second each, to %s/v1/chat/completions (timeout %v).",
			len(c.Keys), c.Rate, c.URL, c.Timeout),
		"Every second, a line of the answers that came back in that second, all keys together",
		"(answers, not requests: a request that waited is counted when its answer came):",
		"  sent     requests sent in that second",
		"  200      answered: the tenant's limits admitted it",
		"  429      refused: the tenant was over a limit (its rpm, tpm or concurrency per window)",
		"  waited   answers (200 or 429) to requests that first waited for room in their tenant's queue",
		"           (they carry x-ringgate-queued-ms). A request over its tenant's limit waits there when",
		"           room is due within queue.interactive_wait (2s by default) and is admitted the moment it",
		"           frees; if room does not come in time it gets its 429 at the end of that wait, and if",
		"           room is not due by then it gets its 429 at once. So a second can show few answers",
		"           while requests wait, then a burst as the waits end.",
		"  longest  the longest of those waits",
		"  failed   no answer (timeout, connection refused or cut); skipped: not sent, 64 already in flight",
		"  other    any other status, as status:count (503 while a tenant moves, 502/504 from the provider)",
	}
	if c.Window > 0 {
		lines = append(lines,
			fmt.Sprintf("Every %v (the tenants' limit window), each key's 200s in that window, which its tenant's", c.Window),
			"rpm caps, and the node that enforced its limits (x-ringgate-node); \"node-2 -> node-4\": the tenant moved",
			"in that window. A tenant that moves with its state keeps to its limit in the window it moves in.",
			"Keys sent at twice their limit from the start get their limit's worth in the first half of each",
			"window, then 429s until those requests leave the window: 200s and 429s take turns.")
	}
	for _, l := range lines {
		fmt.Fprintln(out, "# "+l)
	}
}

// windowBlock writes each key's 200s in the window [from, to) and the
// nodes that enforced it.
func (c Config) windowBlock(out io.Writer, from, to time.Duration, w []keyWindow) {
	fmt.Fprintf(out, "window %s-%s: 200s per key in the window, and the node that enforced its limits\n",
		seconds(from), seconds(to))
	width := 0
	for _, k := range c.Keys {
		width = max(width, len(k))
	}
	for i, k := range c.Keys {
		nodes := "-"
		if len(w[i].nodes) > 0 {
			nodes = strings.Join(w[i].nodes, " -> ")
		}
		fmt.Fprintf(out, "  %-*s %6d  %s\n", width, k, w[i].ok, nodes)
	}
}

// seconds is d to a tenth of a second: "10s", "12.5s".
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Round(100*time.Millisecond).Seconds(), 'f', -1, 64) + "s"
}

// post sends one request and returns what came back (status 0: no
// answer).
func (c Config) post(ctx context.Context, client *http.Client, key, body string) answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return answer{}
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return answer{}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	a := answer{status: resp.StatusCode, node: resp.Header.Get("x-ringgate-node")}
	if ms, err := strconv.ParseInt(resp.Header.Get("x-ringgate-queued-ms"), 10, 64); err == nil {
		a.queued, a.waited = true, time.Duration(ms)*time.Millisecond
	}
	return a
}

// line is each key's counts: "sk-acme-1 200:20 429:4 | …".
func (c Config) line(cs []counts) string {
	var b strings.Builder
	for i, key := range c.Keys {
		if i > 0 {
			b.WriteString(" | ")
		}
		b.WriteString(key)
		for _, status := range slices.Sorted(maps.Keys(cs[i])) {
			name := fmt.Sprint(status)
			switch status {
			case 0:
				name = "failed"
			case -1:
				name = "skipped"
			}
			fmt.Fprintf(&b, " %s:%d", name, cs[i][status])
		}
	}
	return b.String()
}
