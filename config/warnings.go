package config

import (
	"sort"
	"strings"
)

// Warning is a setting that is valid but cannot take effect as written: a
// node starts with it, and logs the warning so that the operator learns why
// the setting does nothing. Its fields are those of an [Error].
type Warning struct {
	File string // file name, or the override that set the key
	Line int    // 1-based line in File; 0 if unknown
	Key  string // key path, e.g. "limits.spillover_rps"
	Msg  string // what happens instead, and what to do
}

// String reads "File:Line: Key: Msg", like an Error.
func (w Warning) String() string {
	return (&Error{File: w.File, Line: w.Line, Key: w.Key, Msg: w.Msg}).Error()
}

// Warnings lists the settings of c that cannot take effect: spillover
// without Redis, cluster.secret or gossip, an env: secret whose variable is unset, gossip with
// nothing to join, no cluster.secret for gossip, and upstreams that list no
// model while unknown models are refused. They are ordered by
// line, then key.
func (c *Config) Warnings() []Warning {
	var out []Warning
	add := func(key, msg string) {
		e := c.errAt(key, "%s", msg)
		out = append(out, Warning{File: e.File, Line: e.Line, Key: key, Msg: msg})
	}
	if c.Node.Gossip != "" && len(c.Node.Join) == 0 {
		add("node.join", "empty while node.gossip is set: this node starts a new cluster and waits for others to join it; "+
			"list the seed members here, or set node.gossip = \"\" for a standalone node")
	}
	if msg := c.secretWarning(); msg != "" {
		add("cluster.secret", msg)
	}
	for _, key := range sortedKeys(c.unsetEnv) {
		if key != "cluster.secret" {
			add(key, unsetEnvWarning(key, c.unsetEnv[key]))
		}
	}
	if msg := c.spilloverWarning(); msg != "" {
		add("limits.spillover_rps", msg)
	}
	if msg := c.unknownModelsWarning(); msg != "" {
		add("limits.unknown_models", msg)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out
}

// secretWarning says what an empty cluster.secret costs, when it is empty
// by accident (an unset env: variable) or on a node that gossips.
func (c *Config) secretWarning() string {
	if len(c.Cluster.Secret) > 0 {
		return ""
	}
	what := "not set"
	if name, ok := c.unsetEnv["cluster.secret"]; ok {
		what = "environment variable " + name + " is not set, so there is no secret"
	} else if c.Node.Gossip == "" {
		return ""
	}
	const fix = "set it to base64 of 32 bytes (openssl rand -base64 32), the same on every node"
	if c.Node.Gossip == "" {
		return what + ": this standalone node does not need one, but a cluster and spillover do; " + fix + ", or write secret = \"\""
	}
	return what + ": gossip is unencrypted and nodes hand no requests to each other, " +
		"so each enforces its strict share of the tenants it does not own; " + fix
}

// spilloverWarning names what spillover needs and c lacks: Redis for the
// leased budgets, cluster.secret for the signed announcements, gossip for
// the other nodes to spill to.
func (c *Config) spilloverWarning() string {
	if c.Limits.SpilloverRPS <= 0 {
		return ""
	}
	var missing []string
	for key, lacks := range map[string]bool{"redis.addr": !c.Redis.Enabled(),
		"cluster.secret": len(c.Cluster.Secret) == 0, "node.gossip": c.Node.Gossip == ""} {
		if lacks {
			missing = append(missing, key)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	sort.Strings(missing)
	return "spillover needs Redis, cluster.secret and a cluster, and this node has no " + strings.Join(missing, ", ") +
		": no tenant spills over; set them, or spillover_rps = 0"
}

// unsetEnvWarning says what the empty value of secret key means.
func unsetEnvWarning(key, name string) string {
	last := lastKey(key)
	effect := map[string]string{
		"token":    "the admin API answers loopback callers only",
		"api_key":  "requests go to the provider without a key",
		"username": "Redis is used without an ACL user",
		"password": "Redis is used without a password",
	}[last]
	if effect == "" {
		effect = "the value is empty"
	}
	return "environment variable " + name + " is not set: " + effect + "; set it, or write " + last + " = \"\""
}

// warningKeys are the keys Warnings may name, whose lines a parsed Config
// keeps.
func warningKeys(c *Config) []string {
	keys := []string{"node.join", "node.gossip", "cluster.secret", "limits.spillover_rps", "limits.unknown_models"}
	for k := range c.unsetEnv {
		keys = append(keys, k)
	}
	return keys
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// lastKey is the last element of a key path: "api_key" of
// "upstreams[0].api_key".
func lastKey(p string) string { return p[strings.LastIndex(p, ".")+1:] }

// unknownModelsWarning names the upstreams that list no model while
// limits.unknown_models is "refuse": no request can reach them, and with
// none listing a model every request is refused.
func (c *Config) unknownModelsWarning() string {
	if c.Limits.UnknownModels != UnknownModelsRefuse {
		return ""
	}
	var idle []string
	for _, u := range c.Upstreams {
		if len(u.Models) == 0 {
			idle = append(idle, u.Name)
		}
	}
	switch {
	case len(idle) == 0:
		return ""
	case len(idle) == len(c.Upstreams):
		return `"refuse" and no upstream lists its models, so every request is refused with 400 model_not_found; ` +
			`list each upstream's models, or set unknown_models = "default"`
	}
	return `"refuse", so upstream ` + strings.Join(idle, ", ") + ` serves nothing: it lists no models; list them`
}
