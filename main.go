// Command ringgate is a gateway cluster in front of LLM providers that keeps
// every tenant inside its requests-per-window, tokens-per-window and
// concurrency limits.
//
//	ringgate -config config.toml      run a node
//	ringgate demo                     a self-contained cluster on loopback
//	ringgate fake-upstream -listen …  the fake OpenAI-compatible provider
//	ringgate load -url … -keys …      a load of chat completions, a line a second
//	ringgate healthcheck              exit 0 if the local node answers /healthz
//	ringgate help                     the subcommands and a node's flags (-h too)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/demo"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/loadgen"
	"github.com/ringgate/ringgate/node"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command args name and returns the exit status: 0, 1 on an
// error, 2 for -h as the flag package has it.
func run(args []string, stdout, stderr io.Writer) int {
	var err error
	switch {
	case len(args) > 0 && args[0] == "demo":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = demo.Run(ctx, args[1:], stdout)
		stop()
	case len(args) > 0 && args[0] == "fake-upstream":
		err = fakeupstream.Main(args[1:], stdout)
	case len(args) > 0 && args[0] == "load":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = loadgen.Run(ctx, args[1:], stdout)
		stop()
	case len(args) > 0 && args[0] == "healthcheck":
		err = healthcheck(args[1:])
	case len(args) > 0 && args[0] == "help":
		usage(stdout)
		return 0
	default:
		if err = serve(args); errors.Is(err, flag.ErrHelp) {
			usage(stderr)
			return 2
		}
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, err)
			return 2
		}
		fmt.Fprintln(stderr, "ringgate:", err)
		return 1
	}
	return 0
}

// commands are ringgate's subcommands, each with its one line of help.
var commands = []struct{ name, help string }{
	{"demo", "run a self-contained cluster on loopback (nodes, a fake provider, load) and print what happens"},
	{"fake-upstream", "run the fake OpenAI- and Anthropic-compatible provider"},
	{"load", "send a load of chat completions to nodes and print a line a second"},
	{"healthcheck", "exit 0 if the node on this host answers /healthz (a container's health check)"},
	{"help", "print this help"},
}

// usage prints how to call ringgate: a node and its flags, and the
// subcommands.
func usage(w io.Writer) {
	fmt.Fprintf(w, "Usage:\n  ringgate [flags]             run a node\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  ringgate %-19s %s\n", c.name, c.help)
	}
	fmt.Fprintf(w, "\nRun \"ringgate <command> -h\" for a command's flags.\n")
	fmt.Fprintf(w, "\nFlags of a node (each also read from RINGGATE_<FLAG>, e.g. RINGGATE_LISTEN):\n%s", config.FlagUsage())
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

// healthcheck asks the node on this host for /healthz and fails unless it
// answers 200 within 2 s: a container's health check, where the image has
// nothing but the binary. The node's address is -url, else
// RINGGATE_LISTEN's port on 127.0.0.1, else 127.0.0.1:8080.
func healthcheck(args []string) error {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	def := "http://127.0.0.1:8080/healthz"
	if l := os.Getenv("RINGGATE_LISTEN"); l != "" {
		if _, port, err := net.SplitHostPort(l); err == nil {
			def = "http://127.0.0.1:" + port + "/healthz"
		}
	}
	url := fs.String("url", def, "the health endpoint to ask")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(*url)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %d", *url, resp.StatusCode)
	}
	return nil
}
