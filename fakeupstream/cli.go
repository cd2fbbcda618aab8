package fakeupstream

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Main is the `ringgate fake-upstream` command. args are the flags (without
// the program or command name), for example
//
//	-listen 127.0.0.1:9000 -latency 50ms -chunk-interval 5ms
//	-completion-min 20 -completion-max 200 -no-usage -seed 1
//	-rpm 500 -tpm 30000 -concurrency 8 -window 1m
//	-model-limit gpt-4o=60/10000/4 -model-limit claude-x=0/5000/0
//
// -rpm, -tpm and -concurrency set Options.Limits (requests and tokens per
// -window, which defaults to one minute; 0 = no limit); each -model-limit
// MODEL=REQUESTS/TOKENS/CONCURRENCY adds a model's limits (0 = none).
//
// It serves until SIGINT or SIGTERM. Once listening it prints one line,
// "fake-upstream listening on ADDR", to stdout.
func Main(args []string, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, args, stdout)
}

// Run is Main served until ctx is done instead of until a signal.
func Run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("fake-upstream", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var o Options
	listen := fs.String("listen", "127.0.0.1:9000", "address to listen on (port 0 picks a free port)")
	fs.DurationVar(&o.Latency, "latency", 0, "delay before the response headers")
	fs.DurationVar(&o.ChunkInterval, "chunk-interval", 0, "delay between stream chunks")
	fs.IntVar(&o.CompletionMin, "completion-min", 20, "minimum completion tokens")
	fs.IntVar(&o.CompletionMax, "completion-max", 200, "maximum completion tokens")
	fs.BoolVar(&o.NoUsage, "no-usage", false, "never report token usage")
	fs.Int64Var(&o.Seed, "seed", 1, "seed of the completion lengths")
	fs.IntVar(&o.Status, "status", 0, "answer every request with this HTTP status (0 = normal answers)")
	fs.IntVar(&o.MaxRecords, "max-records", 10000, "records kept for GET /_records (0 = all)")
	fs.Int64Var(&o.Limits.Requests, "rpm", 0, "provider limit: requests per -window (0 = none)")
	fs.Int64Var(&o.Limits.Tokens, "tpm", 0, "provider limit: tokens charged per -window (0 = none)")
	fs.IntVar(&o.Limits.Concurrency, "concurrency", 0, "provider limit: requests in flight (0 = none)")
	fs.DurationVar(&o.Limits.Window, "window", time.Minute, "sliding window of -rpm, -tpm and -model-limit")
	fs.Func("model-limit", "a model's provider limits, MODEL=REQUESTS/TOKENS/CONCURRENCY (0 = none; repeatable)", func(v string) error {
		name, ml, err := parseModelLimit(v)
		if err != nil {
			return err
		}
		if o.Limits.Models == nil {
			o.Limits.Models = make(map[string]ModelLimits)
		}
		o.Limits.Models[name] = ml
		return nil
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("fake-upstream: unexpected arguments %q", fs.Args())
	}

	s := New(o)
	addr, err := s.Start(*listen)
	if err != nil {
		return fmt.Errorf("fake-upstream: %w", err)
	}
	if _, err := fmt.Fprintf(stdout, "fake-upstream listening on %s\n", addr); err != nil {
		_ = s.Close()
		return err
	}
	<-ctx.Done()
	return s.Close()
}

// parseModelLimit parses MODEL=REQUESTS/TOKENS/CONCURRENCY.
func parseModelLimit(v string) (string, ModelLimits, error) {
	i := strings.LastIndexByte(v, '=')
	if i <= 0 {
		return "", ModelLimits{}, fmt.Errorf("want MODEL=REQUESTS/TOKENS/CONCURRENCY, got %q", v)
	}
	parts := strings.Split(v[i+1:], "/")
	if len(parts) != 3 {
		return "", ModelLimits{}, fmt.Errorf("want MODEL=REQUESTS/TOKENS/CONCURRENCY, got %q", v)
	}
	var n [3]int64
	for j, p := range parts {
		bits := 64
		if j == 2 {
			bits = strconv.IntSize
		}
		x, err := strconv.ParseInt(p, 10, bits)
		if err != nil || x < 0 {
			return "", ModelLimits{}, fmt.Errorf("%q: %q is not a count", v, p)
		}
		n[j] = x
	}
	return v[:i], ModelLimits{Requests: n[0], Tokens: n[1], Concurrency: int(n[2])}, nil
}
