// Command ringgate is a gateway cluster in front of LLM providers that keeps
// every tenant inside its requests-per-window, tokens-per-window and
// concurrency limits.
//
//	ringgate -config config.toml      run a node
//	ringgate demo                     a self-contained cluster on loopback
//	ringgate fake-upstream -listen …  the fake OpenAI-compatible provider
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/demo"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/node"
)

func main() {
	args := os.Args[1:]
	var err error
	switch {
	case len(args) > 0 && args[0] == "demo":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = demo.Run(ctx, args[1:], os.Stdout)
		stop()
	case len(args) > 0 && args[0] == "fake-upstream":
		err = fakeupstream.Main(args[1:], os.Stdout)
	default:
		err = serve(args)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "ringgate:", err)
		os.Exit(1)
	}
}

// serve runs one node until SIGTERM or SIGINT (drain, exit 0); SIGHUP reloads
// tenants and limits from the same file.
func serve(args []string) error {
	cfg, err := config.FromArgs(args, os.Getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	// go-redis reports each failed dial on its own process-wide logger;
	// keep those in the JSON log, at debug level (the snapshot store counts
	// and logs failures itself).
	redis.SetLogger(redisLog{log})
	source := func() (*config.Config, error) { return config.FromArgs(args, os.Getenv) }
	n, err := node.Start(cfg, node.Options{Logger: log, Source: source})
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	for sig := range sigs {
		if sig == syscall.SIGHUP {
			n.ReloadFromSource("sighup") // logged, and shown in /cluster
			continue
		}
		signal.Stop(sigs)
		n.Drain()
		return nil
	}
	return nil
}

type redisLog struct{ l *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.l.DebugContext(ctx, "redis", "detail", fmt.Sprintf(format, v...))
}
