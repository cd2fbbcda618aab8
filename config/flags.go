package config

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// FromArgs builds the configuration for a run from command-line arguments
// (without the program name) and the environment.
//
// Flags: -config PATH (default "config.toml"), -node, -listen, -gossip,
// -advertise, -join A,B and -redis HOST:PORT. Each has an environment
// variable RINGGATE_<FLAG> (upper case, '-' as '_'), e.g. RINGGATE_LISTEN,
// RINGGATE_CONFIG. Precedence: an explicit flag, then a non-empty env
// variable, then the file, then defaults. An explicit empty flag is honoured
// (-redis "" disables Redis, -join "" starts a new cluster); an empty env
// variable counts as unset.
//
// The file must exist. getenv (os.Getenv if nil) also resolves the file's
// env: values. The result is validated; override errors name the flag or
// variable ("flag -listen: node.listen: must be host:port ..."). -h returns
// an error wrapping flag.ErrHelp whose message is the usage text.
func FromArgs(args []string, getenv func(string) string) (*Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var out bytes.Buffer
	fs := flagSet(&out)
	if err := fs.Parse(args); err != nil {
		return nil, &usageError{err: err, usage: strings.TrimSpace(out.String())}
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags: -config -node -listen -gossip -advertise -join -redis; ringgate help lists the commands)", fs.Arg(0))
	}

	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	// lookup returns the override for a flag and where it came from.
	lookup := func(name string) (val, origin string, ok bool) {
		if explicit[name] {
			return fs.Lookup(name).Value.String(), "flag -" + name, true
		}
		env := "RINGGATE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if v := getenv(env); v != "" {
			return v, "env " + env, true
		}
		return "", "", false
	}

	path := "config.toml"
	if v, origin, ok := lookup("config"); ok {
		if v == "" {
			return nil, &Error{File: origin, Msg: "config file name is empty"}
		}
		path = v
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	c, err := decode(data, path, getenv)
	if err != nil {
		return nil, err
	}
	for _, o := range overrides {
		v, origin, ok := lookup(o.flag)
		if !ok {
			continue
		}
		if c.origin == nil {
			c.origin = map[string]string{}
		}
		c.origin[o.key] = origin
		v = strings.TrimSpace(v)
		switch o.flag {
		case "node":
			c.Node.Name = v
		case "listen":
			c.Node.Listen = v
		case "gossip":
			c.Node.Gossip = v
		case "advertise":
			c.Node.Advertise = v
		case "join":
			c.Node.Join = splitList(v)
		case "redis":
			c.Redis.Addr = v
		}
	}
	if err := c.finish(); err != nil {
		return nil, err
	}
	return c, nil
}

// overrides are the flags that override a key of the file.
var overrides = []struct{ flag, key, usage string }{
	{"node", "node.name", "unique node `name` (default the host name)"},
	{"listen", "node.listen", "HTTP `host:port` for clients, peers and admin"},
	{"gossip", "node.gossip", "memberlist bind `host:port` (TCP and UDP)"},
	{"advertise", "node.advertise", "gossip `host:port` peers use, if not the bind one"},
	{"join", "node.join", "comma-separated seed gossip `addresses`; empty: start a new cluster"},
	{"redis", "redis.addr", "Redis `host:port`; empty: no Redis"},
}

// flagSet is the flags FromArgs reads, writing its messages to out.
func flagSet(out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("ringgate", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.String("config", "config.toml", "TOML config `file`")
	for _, o := range overrides {
		fs.String(o.flag, "", o.usage+" (overrides "+o.key+")")
	}
	return fs
}

// FlagUsage is the list of a node's flags, one flag and its meaning on two
// lines each, as the flag package prints them.
func FlagUsage() string {
	var out bytes.Buffer
	flagSet(&out).PrintDefaults()
	return out.String()
}

// splitList splits "a, b,,c" into [a b c]; "" gives an empty list.
func splitList(s string) []string {
	out := []string{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

type usageError struct {
	err   error
	usage string
}

func (e *usageError) Error() string { return e.usage }
func (e *usageError) Unwrap() error { return e.err }
