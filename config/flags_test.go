package config

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func writeFile(t *testing.T, dir, name, data string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFromArgsPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "a.toml", `
[node]
name = "file-node"
listen = "127.0.0.1:1001"
gossip = "127.0.0.1:2001"
join = ["10.0.0.1:7946"]
[redis]
addr = "127.0.0.1:6379"
`)
	other := writeFile(t, dir, "b.toml", `
[node]
listen = "127.0.0.1:1002"
`)
	type want struct {
		name, listen, gossip, advertise, redis string
		join                                   []string
		path                                   string
	}
	fileWant := want{"file-node", "127.0.0.1:1001", "127.0.0.1:2001", "", "127.0.0.1:6379", []string{"10.0.0.1:7946"}, file}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want want
	}{
		{"file only", []string{"-config", file}, nil, fileWant},
		{"env over file", []string{"-config", file}, map[string]string{
			"RINGGATE_NODE": "env-node", "RINGGATE_LISTEN": "127.0.0.1:3001", "RINGGATE_GOSSIP": "127.0.0.1:3002",
			"RINGGATE_ADVERTISE": "10.1.1.1:3002", "RINGGATE_JOIN": "10.0.0.2:1, 10.0.0.3:1", "RINGGATE_REDIS": "10.0.0.9:6379",
		}, want{"env-node", "127.0.0.1:3001", "127.0.0.1:3002", "10.1.1.1:3002", "10.0.0.9:6379", []string{"10.0.0.2:1", "10.0.0.3:1"}, file}},
		{"flag over env", []string{"-config", file, "-node", "flag-node", "-listen", "127.0.0.1:4001",
			"-gossip=127.0.0.1:4002", "-advertise", "10.2.2.2:4002", "-join", "10.0.0.4:1", "-redis", "10.0.0.8:6379"},
			map[string]string{"RINGGATE_NODE": "env-node", "RINGGATE_LISTEN": "127.0.0.1:3001", "RINGGATE_JOIN": "10.0.0.2:1"},
			want{"flag-node", "127.0.0.1:4001", "127.0.0.1:4002", "10.2.2.2:4002", "10.0.0.8:6379", []string{"10.0.0.4:1"}, file}},
		{"empty flag disables redis and join", []string{"-config", file, "-redis", "", "-join="},
			map[string]string{"RINGGATE_REDIS": "10.0.0.9:6379"},
			want{"file-node", "127.0.0.1:1001", "127.0.0.1:2001", "", "", []string{}, file}},
		{"empty env is unset", []string{"-config", file}, map[string]string{"RINGGATE_REDIS": "", "RINGGATE_LISTEN": ""}, fileWant},
		{"env config", nil, map[string]string{"RINGGATE_CONFIG": other},
			want{"", "127.0.0.1:1002", "127.0.0.1:7946", "", "", nil, other}},
		{"flag config over env config", []string{"-config", file}, map[string]string{"RINGGATE_CONFIG": other}, fileWant},
	}
	host, _ := os.Hostname()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := FromArgs(tt.args, envMap(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			w := tt.want
			if w.name == "" {
				w.name = host
			}
			got := want{c.Node.Name, c.Node.Listen, c.Node.Gossip, c.Node.Advertise, c.Redis.Addr, c.Node.Join, c.Path}
			if !reflect.DeepEqual(got, w) {
				t.Errorf("\n got %+v\nwant %+v", got, w)
			}
		})
	}
}

func TestFromArgsDefaultConfigPath(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "config.toml", "[node]\nlisten = \"127.0.0.1:5005\"\n")
	t.Chdir(dir)
	c, err := FromArgs(nil, envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Path != "config.toml" || c.Node.Listen != "127.0.0.1:5005" {
		t.Errorf("path %q listen %q", c.Path, c.Node.Listen)
	}
}

func TestFromArgsErrors(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "a.toml", "[node]\nlisten = \"bad\"\n")
	good := writeFile(t, dir, "g.toml", "[node]\nlisten = \"127.0.0.1:1\"\n")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string // substring
	}{
		{"flag value invalid", []string{"-config", good, "-listen", "nope"}, nil,
			`flag -listen: node.listen: must be host:port (got "nope": missing port in address)`},
		{"env value invalid", []string{"-config", good}, map[string]string{"RINGGATE_JOIN": "10.0.0.1"},
			`env RINGGATE_JOIN: node.join[0]: must be host:port (got "10.0.0.1": missing port in address)`},
		{"flag fixes bad file value", []string{"-config", file, "-listen", "127.0.0.1:9"}, nil, ""},
		{"bad file value", []string{"-config", file}, nil, `a.toml:2: node.listen: must be host:port`},
		{"missing file", []string{"-config", filepath.Join(dir, "none.toml")}, nil, "none.toml"},
		{"unknown flag", []string{"-config", good, "-bogus"}, nil, "flag provided but not defined: -bogus"},
		{"extra argument", []string{"-config", good, "demo"}, nil, `unexpected argument "demo"`},
		{"empty config env", []string{"-config", ""}, nil, "flag -config: config file name is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromArgs(tt.args, envMap(tt.env))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want it to contain %q", err, tt.want)
			}
		})
	}

	_, err := FromArgs([]string{"-h"}, envMap(nil))
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(err.Error(), "-listen host:port") {
		t.Errorf("-h: %v", err)
	}
}
