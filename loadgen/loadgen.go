// Package loadgen is `ringgate load`: a small open-loop load of chat
// completions against a ringgate front (a node or the load balancer before
// the nodes), one stream of requests per tenant key at a fixed rate, with
// a line a second of what came back. The local cluster recipe (make
// cluster, scale-up, scale-down) runs it so that an operator watches
// tenants stay within their limits while nodes come and go.
//
// It knows nothing of ringgate's insides: only the client API.
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
}

// maxInFlight bounds the requests a key has in flight: past it a due
// request is skipped and counted as such, not queued.
const maxInFlight = 64

// Run parses args (flags) and runs the load until ctx ends or the duration
// passes, writing a line a second and a total to out.
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
	}
	return c.Run(ctx, out)
}

// counts are one key's answers by status (0: no answer; -1: skipped, too
// many in flight).
type counts map[int]int

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
	var mu sync.Mutex
	second, total := make([]counts, len(c.Keys)), make([]counts, len(c.Keys))
	for i := range c.Keys {
		second[i], total[i] = counts{}, counts{}
	}
	note := func(i, status int) {
		mu.Lock()
		second[i][status]++
		total[i][status]++
		mu.Unlock()
	}
	body := fmt.Sprintf(`{"model":%q,"max_tokens":16,"messages":[{"role":"user","content":"Say hello from the load generator."}]}`, c.Model)
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
					note(i, -1)
					continue
				}
				inflight.Go(func() {
					defer func() { <-sem }()
					note(i, c.post(sendCtx, client, key, body))
				})
			}
		})
	}
	start := time.Now()
	report := time.NewTicker(time.Second)
	defer report.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-report.C:
		}
		mu.Lock()
		fmt.Fprintf(out, "%6.1fs %s\n", time.Since(start).Seconds(), c.line(second))
		for i := range second {
			second[i] = counts{}
		}
		mu.Unlock()
	}
	wg.Wait()
	fmt.Fprintf(out, "total  %s\n", c.line(total))
	return nil
}

// post sends one request and returns its status (0: no answer).
func (c Config) post(ctx context.Context, client *http.Client, key, body string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
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
