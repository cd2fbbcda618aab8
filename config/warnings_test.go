package config

import (
	"strings"
	"testing"
)

// warningsOf parses doc as t.toml with env and returns its warnings, one
// string each.
func warningsOf(t *testing.T, doc string, env map[string]string) []string {
	t.Helper()
	c, err := parse([]byte(doc), "t.toml", envMap(env))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, w := range c.Warnings() {
		out = append(out, w.String())
	}
	return out
}

// standalone is a node with nothing that warns.
const standalone = `
[node]
gossip = ""
`

func TestWarningsNoneForAStandaloneNode(t *testing.T) {
	if got := warningsOf(t, standalone, nil); len(got) != 0 {
		t.Errorf("warnings = %q, want none", got)
	}
	c := Default()
	c.Node.Gossip = ""
	if got := c.Warnings(); len(got) != 0 {
		t.Errorf("Default() standalone: warnings = %v, want none", got)
	}
}

func TestWarningSpilloverWithoutRedis(t *testing.T) {
	doc := standalone + `
[limits]
spillover_rps = 50
`
	got := warningsOf(t, doc, nil)
	want := "t.toml:6: limits.spillover_rps: spillover needs Redis, cluster.secret and a cluster, " +
		"and this node has no cluster.secret, node.gossip, redis.addr: no tenant spills over"
	if len(got) != 1 || !strings.HasPrefix(got[0], want) {
		t.Errorf("warnings = %q, want one starting %q", got, want)
	}
	cluster := `
[node]
gossip = "127.0.0.1:7946"
join = ["10.0.0.1:7946"]

[cluster]
secret = "` + secret32 + `"

[redis]
addr = "127.0.0.1:6379"

[limits]
spillover_rps = 50
`
	if got := warningsOf(t, cluster, nil); len(got) != 0 {
		t.Errorf("with Redis, a secret and a cluster: warnings = %q, want none", got)
	}
	noRedis := strings.Replace(cluster, `addr = "127.0.0.1:6379"`, "", 1)
	if got := warningsOf(t, noRedis, nil); len(got) != 1 || !strings.Contains(got[0], "this node has no redis.addr:") {
		t.Errorf("without redis.addr: warnings = %q, want one naming redis.addr", got)
	}
}

func TestWarningUnsetEnvSecrets(t *testing.T) {
	doc := standalone + `
[cluster]
secret = "env:RG_SECRET"

[admin]
token = "env:RG_TOKEN"

[[upstreams]]
name = "p"
base_url = "http://127.0.0.1:9000"
api_key = "env:RG_KEY"
`
	got := warningsOf(t, doc, nil)
	want := []string{
		"t.toml:6: cluster.secret: environment variable RG_SECRET is not set",
		"t.toml:9: admin.token: environment variable RG_TOKEN is not set: the admin API answers loopback callers only",
		"t.toml:14: upstreams[0].api_key: environment variable RG_KEY is not set: requests go to the provider without a key",
	}
	if len(got) != len(want) {
		t.Fatalf("warnings = %q, want %d", got, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("warning %d = %q, want it to start %q", i, got[i], want[i])
		}
	}
	set := map[string]string{"RG_SECRET": secret32, "RG_TOKEN": "t", "RG_KEY": "k"}
	if got := warningsOf(t, doc, set); len(got) != 0 {
		t.Errorf("with the variables set: warnings = %q, want none", got)
	}
}

func TestWarningGossipWithNothingToJoin(t *testing.T) {
	doc := `
[node]
gossip = "127.0.0.1:7946"

[cluster]
secret = "` + secret32 + `"
`
	got := warningsOf(t, doc, nil)
	if len(got) != 1 || !strings.HasPrefix(got[0], "t.toml:2: node.join: empty while node.gossip is set") {
		t.Errorf("warnings = %q, want one on node.join at the [node] line", got)
	}
	joined := strings.Replace(doc, `gossip = "127.0.0.1:7946"`, `gossip = "127.0.0.1:7946"`+"\njoin = [\"10.0.0.1:7946\"]", 1)
	if got := warningsOf(t, joined, nil); len(got) != 0 {
		t.Errorf("with node.join: warnings = %q, want none", got)
	}
}

func TestWarningGossipWithoutSecret(t *testing.T) {
	doc := `
[node]
gossip = "127.0.0.1:7946"
join = ["10.0.0.1:7946"]
`
	got := warningsOf(t, doc, nil)
	if len(got) != 1 || !strings.HasPrefix(got[0], "t.toml: cluster.secret: not set: gossip is unencrypted") {
		t.Errorf("warnings = %q, want one on cluster.secret", got)
	}
}

func TestWarningNamesTheFlag(t *testing.T) {
	c := Default()
	c.Path = "t.toml"
	c.origin = map[string]string{"node.join": "flag -join"}
	c.Cluster.Secret = make([]byte, 32)
	got := c.Warnings()
	if len(got) != 1 || got[0].File != "flag -join" || got[0].Key != "node.join" {
		t.Errorf("warnings = %v, want one on node.join naming flag -join", got)
	}
}

// TestWarningsKeepLinesNotText: a parsed config keeps none of its text, and
// reads it for lines only when it has warnings.
func TestWarningsKeepLinesNotText(t *testing.T) {
	c, err := parse([]byte(standalone), "t.toml", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.lines != nil {
		t.Error("a config without warnings keeps its lines")
	}
	c, err = parse([]byte(standalone+"[limits]\nspillover_rps = 5\n"), "t.toml", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.lines == nil || c.lines.data != nil || c.lines.lines["limits.spillover_rps"] != 5 || len(c.lines.lines) > 4 {
		t.Errorf("a config with one warning keeps %+v, want the lines of the keys warnings name only", c.lines)
	}
}

// TestKeyLinesWanted: with want, keyLines finds the wanted paths' lines as
// without it, and no others.
func TestKeyLinesWanted(t *testing.T) {
	doc := `node.name = "n"
[node]
join = ["a:1"]
[[upstreams]]
name = "a"
[[upstreams]]
api_key = "k"
[upstreams.x]
api_key = "no"
[[tenants]]
rpm = 1
[limits]
spillover_rps = 1
`
	want := map[string]bool{"node": true, "node.join": true, "node.name": true, "upstreams": true, "upstreams[1]": true,
		"upstreams[1].api_key": true, "limits": true, "limits.spillover_rps": true, "tenants[0].rpm": false}
	all, got := keyLines([]byte(doc), nil), keyLines([]byte(doc), want)
	for p, w := range want {
		if _, ok := got[p]; !w && ok {
			t.Errorf("%s: found, not wanted", p)
		} else if w && (got[p] == 0 || got[p] != all[p]) {
			t.Errorf("line of %s = %d, want %d", p, got[p], all[p])
		}
	}
	if len(got) != 8 {
		t.Errorf("found %v, want the 8 wanted paths", got)
	}
}

// With unknown_models = "refuse", an upstream that lists no model is never
// chosen; when none lists one, every request is refused.
func TestWarningUnknownModelsRefuseWithoutModels(t *testing.T) {
	up := func(name, models string) string {
		return "\n[[upstreams]]\nname = \"" + name + "\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9\"\n" + models
	}
	refuse := standalone + "\n[limits]\nunknown_models = \"refuse\"\n"
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"none lists models", refuse + up("a", ""), `t.toml:6: limits.unknown_models: "refuse" and no upstream lists its models, so every request is refused`},
		{"one lists none", refuse + up("a", "models = [\"m\"]\n") + up("b", ""), `t.toml:6: limits.unknown_models: "refuse", so upstream b serves nothing`},
		{"all list models", refuse + up("a", "models = [\"m\"]\n"), ""},
		{"default", standalone + up("a", ""), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := warningsOf(t, tc.doc, nil)
			if tc.want == "" {
				if len(got) != 0 {
					t.Errorf("warnings = %q, want none", got)
				}
				return
			}
			if len(got) != 1 || !strings.HasPrefix(got[0], tc.want) {
				t.Errorf("warnings = %q, want one starting %q", got, tc.want)
			}
		})
	}
}
