package fakeupstream

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Main is the `ringgate fake-upstream` command. args are the flags (without
// the program or command name), for example
//
//	-listen 127.0.0.1:9000 -latency 50ms -chunk-interval 5ms
//	-completion-min 20 -completion-max 200 -no-usage -seed 1
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
