package config

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

var noEnv = envMap(nil)

// sha256 of "k1"
var k1Hash = func() string { h := sha256.Sum256([]byte("k1")); return hex.EncodeToString(h[:]) }()

var secret32 = base64.StdEncoding.EncodeToString(make([]byte, 32))

func TestValidationErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want string
	}{
		// Shape: unknown keys and types.
		{"unknown key with suggestion", `
[node]
listen = "127.0.0.1:1"
lisen = "x"`, `t.toml:4: node.lisen: unknown key (did you mean "listen"?)`},
		{"unknown key no suggestion", `
[redis]
colour = "blue"`, `t.toml:3: redis.colour: unknown key`},
		{"unknown table", `
[nodes]
name = "a"`, `t.toml:2: nodes: unknown key (did you mean "node"?)`},
		{"unknown key in array table", `
[[tenants]]
name = "a"
keys = ["k"]
[[tenants]]
name = "b"
key = ["k2"]`, `t.toml:7: tenants[1].key: unknown key (did you mean "keys"?)`},
		{"unknown key dotted", `
node.listen = "127.0.0.1:1"
node.bogus = 1`, `t.toml:3: node.bogus: unknown key`},
		{"string expected", `
[node]
listen = 8080`, `t.toml:3: node.listen: must be a string (got integer)`},
		{"table expected", `
node = 5`, `t.toml:2: node: must be a table (got integer)`},
		{"array of tables expected", `
[tenants]
name = "x"`, `t.toml:2: tenants: must be an array of tables, written [[tenants]] (got table)`},
		{"array of strings expected", `
[node]
join = "a:1"`, `t.toml:3: node.join: must be an array of strings (got string)`},
		{"array element type", `
[node]
join = [
  "a:1",
  2,
]`, `t.toml:5: node.join[1]: must be a string (got integer)`},
		{"integer expected", `
[[tenants]]
name = "a"
keys = ["k"]
rpm = 1.5`, `t.toml:5: tenants[0].rpm: must be an integer (got float)`},
		{"duration type", `
[limits]
window = 60`, `t.toml:3: limits.window: must be a duration string like "15s" (got integer)`},
		{"duration syntax", `
[limits]
window = "60"`, `t.toml:3: limits.window: bad duration "60" (use a number and unit, e.g. "15s", "100ms")`},

		// Limits.
		{"window zero", `
[limits]
window = "0s"`, `t.toml:3: limits.window: must be > 0 (got 0s)`},
		{"slot_ttl negative", `
[limits]
slot_ttl = "-1m"`, `t.toml:3: limits.slot_ttl: must be > 0 (got -1m0s)`},
		{"max_body_bytes zero", `
[limits]

max_body_bytes = 0`, `t.toml:4: limits.max_body_bytes: must be > 0 (got 0)`},
		{"default_completion negative", `
[limits]
default_completion = -1`, `t.toml:3: limits.default_completion: must be >= 0 (got -1)`},
		{"unknown_models value", `
[limits]
window = "60s"
unknown_models = "reject"`, `t.toml:4: limits.unknown_models: must be "default" or "refuse" (got "reject")`},
		{"unknown_models empty in file", `
[limits]
unknown_models = ""`, `t.toml:3: limits.unknown_models: must be "default" or "refuse" (got "")`},
		{"unknown_models type", `
[limits]
unknown_models = false`, `t.toml:3: limits.unknown_models: must be a string (got boolean)`},
		{"unknown_models refuse and a limit on an unlisted model", `
[limits]
unknown_models = "refuse"
[[upstreams]]
name = "u"
base_url = "https://x"
models = ["m"]
[[upstreams.model_limits]]
model = "other"
rpm = 5`, `t.toml:9: upstreams[0].model_limits[0].model: model "other" is not in upstreams[0].models and limits.unknown_models is "refuse", so no request for it comes here`},

		// Node.
		{"listen no port", `
[node]
listen = "localhost"`, `t.toml:3: node.listen: must be host:port (got "localhost": missing port in address)`},
		{"gossip bad port", `
[node]
gossip = "127.0.0.1:http"`, `t.toml:3: node.gossip: port must be a number 0-65535 (got "127.0.0.1:http")`},
		{"advertise needs host", `
[node]
advertise = ":7946"`, `t.toml:3: node.advertise: needs a host, not just a port (got ":7946")`},
		{"join element", `
[node]
join = ["10.0.0.1:7946",
        "10.0.0.2"]`, `t.toml:4: node.join[1]: must be host:port (got "10.0.0.2": missing port in address)`},
		{"drain_timeout negative", `
[node]
drain_timeout = "-1s"`, `t.toml:3: node.drain_timeout: must be >= 0 (got -1s)`},
		{"header_timeout zero", `
[node]
header_timeout = "0s"`, `t.toml:3: node.header_timeout: must be > 0 (got 0s)`},
		{"header_timeout syntax", `
[node]
header_timeout = "10"`, `t.toml:3: node.header_timeout: bad duration "10" (use a number and unit, e.g. "15s", "100ms")`},
		{"body_min_rate zero", `
[node]
name = "a"

body_min_rate = 0`, `t.toml:5: node.body_min_rate: must be > 0 bytes per second (got 0)`},
		{"body_min_rate negative", `
[node]
body_min_rate = -4096`, `t.toml:3: node.body_min_rate: must be > 0 bytes per second (got -4096)`},
		{"body_min_rate not an integer", `
[node]
body_min_rate = "4k"`, `t.toml:3: node.body_min_rate: must be an integer (got string)`},
		{"body_grace negative", `
[node]
body_grace = "-5s"`, `t.toml:3: node.body_grace: must be > 0 (got -5s)`},
		{"body_grace type", `
[node]
body_grace = 5`, `t.toml:3: node.body_grace: must be a duration string like "15s" (got integer)`},

		// Cluster, Redis.
		{"secret not base64", `
[cluster]
secret = "not base64!"`, `t.toml:3: cluster.secret: must be base64 of 32 bytes (not valid base64; try: openssl rand -base64 32)`},
		{"secret wrong length", `
[cluster]
secret = "` + base64.StdEncoding.EncodeToString(make([]byte, 16)) + `"`, `t.toml:3: cluster.secret: must be base64 of exactly 32 bytes (got 16 bytes; try: openssl rand -base64 32)`},
		{"forward_connect_timeout zero", `
[cluster]
forward_connect_timeout = "0s"`, `t.toml:3: cluster.forward_connect_timeout: must be > 0 (got 0s)`},
		{"redis addr", `
[redis]
addr = "redis"`, `t.toml:3: redis.addr: must be host:port (got "redis": missing port in address)`},
		{"redis timeout zero", `
[redis]
timeout = "0ms"`, `t.toml:3: redis.timeout: must be > 0 (got 0s)`},
		{"redis addr and addrs", `
[redis]
addr = "127.0.0.1:6379"
addrs = ["127.0.0.1:7000", "127.0.0.1:7001"]`, `t.toml:4: redis.addrs: set either redis.addr (one Redis) or redis.addrs, not both`},
		{"redis addrs entry", `
[redis]
addrs = ["127.0.0.1:7000", ":7001"]`, `t.toml:3: redis.addrs[1]: needs a host, not just a port (got ":7001")`},
		{"redis master_name alone", `
[redis]
master_name = "mymaster"`, `t.toml:3: redis.master_name: needs the Sentinels' addresses in redis.addrs`},
		{"redis password without redis", `
[redis]
password = "pw"`, `t.toml:3: redis.password: set without redis.addr or redis.addrs`},
		{"redis tls type", `
[redis]
addr = "127.0.0.1:6379"
tls = "yes"`, `t.toml:4: redis.tls: must be true or false (got string)`},
		{"redis tls_ca_file without tls", `
[redis]
addr = "127.0.0.1:6379"
tls_ca_file = "/etc/ssl/ca.pem"`, `t.toml:4: redis.tls_ca_file: set with redis.tls = false: set redis.tls = true to connect over TLS`},
		{"redis tls_ca_file missing", `
[redis]
addr = "127.0.0.1:6379"
tls = true
tls_ca_file = "/nonexistent/ca.pem"`, `t.toml:5: redis.tls_ca_file: cannot read "/nonexistent/ca.pem": no such file or directory`},
		{"redis tls_ca_file not PEM", `
[redis]
addr = "127.0.0.1:6379"
tls = true
tls_ca_file = "config_test.go"`, `t.toml:5: redis.tls_ca_file: "config_test.go" holds no PEM certificate`},

		// Upstreams.
		{"upstream kind", `
[[upstreams]]
name = "u"
kind = "azure"
base_url = "https://x"`, `t.toml:4: upstreams[0].kind: must be "openai" or "anthropic" (got "azure")`},
		{"upstream base_url relative", `
[[upstreams]]
name = "u"
base_url = "api.openai.com"`, `t.toml:4: upstreams[0].base_url: must be an absolute http:// or https:// URL (got "api.openai.com")`},
		{"upstream base_url scheme", `
[[upstreams]]
name = "u"
base_url = "ftp://host"`, `t.toml:4: upstreams[0].base_url: must be an absolute http:// or https:// URL (got "ftp://host")`},
		{"upstream base_url query", `
[[upstreams]]
name = "u"
base_url = "https://host/?a=b"`, `t.toml:4: upstreams[0].base_url: must not have a query or fragment (got "https://host/?a=b")`},
		{"upstream base_url missing", `
[[upstreams]]
name = "u"`, `t.toml:2: upstreams[0].base_url: must be set to an http:// or https:// URL`},
		{"upstream name empty", `
[[upstreams]]
base_url = "https://x"`, `t.toml:2: upstreams[0].name: must not be empty`},
		{"upstream name duplicate", `
[[upstreams]]
name = "u"
base_url = "https://x"
[[upstreams]]
name = "u"
base_url = "https://y"`, `t.toml:6: upstreams[1].name: duplicate upstream name "u" (also upstreams[0])`},
		{"model in two upstreams", `
[[upstreams]]
name = "a"
base_url = "https://x"
models = ["m1", "m2"]
[[upstreams]]
name = "b"
base_url = "https://y"
models = [
  "m3",
  "m2",
]`, `t.toml:11: upstreams[1].models[1]: model "m2" is already listed by upstreams[0].models[1]`},
		{"upstream rpm negative", `
[[upstreams]]
name = "a"
base_url = "https://x"
rpm = -1`, `t.toml:5: upstreams[0].rpm: must be >= 0 (got -1)`},
		{"upstream timeout zero", `
[[upstreams]]
name = "a"
base_url = "https://x"
stream_idle_timeout = "0s"`, `t.toml:5: upstreams[0].stream_idle_timeout: must be > 0 (got 0s)`},

		// Upstream on_redis_down.
		{"on_redis_down value", `
[[upstreams]]
name = "a"
base_url = "https://x"
on_redis_down = "fail-open"`, `t.toml:5: upstreams[0].on_redis_down: must be "share", "open" or "closed" (got "fail-open")`},
		{"on_redis_down case", `
[[upstreams]]
name = "a"
base_url = "https://x"
[[upstreams]]
name = "b"
base_url = "https://y"
on_redis_down = "Open"`, `t.toml:8: upstreams[1].on_redis_down: must be "share", "open" or "closed" (got "Open")`},
		{"on_redis_down empty in file", `
[[upstreams]]
name = "a"
base_url = "https://x"
on_redis_down = ""`, `t.toml:5: upstreams[0].on_redis_down: must be "share", "open" or "closed" (got "")`},
		{"on_redis_down type", `
[[upstreams]]
name = "a"
base_url = "https://x"
on_redis_down = true`, `t.toml:5: upstreams[0].on_redis_down: must be a string (got boolean)`},
		{"on_redis_down misspelt", `
[[upstreams]]
name = "a"
base_url = "https://x"
on_redis_dwn = "open"`, `t.toml:5: upstreams[0].on_redis_dwn: unknown key (did you mean "on_redis_down"?)`},

		// Upstream model_limits.
		{"model_limits unknown key", `
[[upstreams]]
name = "a"
base_url = "https://x"
models = ["m"]
[[upstreams.model_limits]]
model = "m"
rmp = 5`, `t.toml:8: upstreams[0].model_limits[0].rmp: unknown key (did you mean "rpm"?)`},
		{"model_limits unknown key no suggestion", `
[[upstreams]]
name = "a"
base_url = "https://x"
models = ["m"]
[[upstreams.model_limits]]
model = "m"
rpm = 1
[[upstreams.model_limits]]
model = "m2"
window = "1s"`, `t.toml:11: upstreams[0].model_limits[1].window: unknown key`},
		{"model_limits unknown key inline", `
[[upstreams]]
name = "a"
base_url = "https://x"
models = ["m"]
model_limits = [
  {model = "m", rpm = 1, tmp = 2},
]`, `t.toml:7: upstreams[0].model_limits[0].tmp: unknown key (did you mean "tpm"?)`},
		{"model_limits misspelt", `
[[upstreams]]
name = "a"
base_url = "https://x"
[[upstreams.model_limit]]
model = "m"`, `t.toml:5: upstreams[0].model_limit: unknown key (did you mean "model_limits"?)`},
		{"model_limits not an array of tables", `
[[upstreams]]
name = "a"
base_url = "https://x"
[upstreams.model_limits]
model = "m"`, `t.toml:5: upstreams[0].model_limits: must be an array of tables, written [[upstreams.model_limits]] (got table)`},
		{"model_limits rpm negative", `
[[upstreams]]
name = "a"
base_url = "https://x"
models = ["m"]
[[upstreams.model_limits]]
model = "m"
rpm = -1`, `t.toml:8: upstreams[0].model_limits[0].rpm: must be >= 0 (got -1)`},
		{"model_limits tpm negative", `
[[upstreams]]
name = "a"
base_url = "https://x"
models = ["m"]
[[upstreams.model_limits]]
model = "m"
rpm = 5
tpm = -100`, `t.toml:9: upstreams[0].model_limits[0].tpm: must be >= 0 (got -100)`},
		{"model_limits concurrency negative, second upstream", `
[[upstreams]]
name = "a"
base_url = "https://x"
[[upstreams]]
name = "b"
base_url = "https://y"
models = ["m"]
[[upstreams.model_limits]]
model = "m"
tpm = 5
concurrency = -3`, `t.toml:12: upstreams[1].model_limits[0].concurrency: must be >= 0 (got -3)`},
		{"model_limits rpm not an integer", `
[[upstreams]]
name = "a"
base_url = "https://x"
models = ["m"]
[[upstreams.model_limits]]
model = "m"
rpm = "5000"`, `t.toml:8: upstreams[0].model_limits[0].rpm: must be an integer (got string)`},
		{"model_limits no limit", `
[[upstreams]]
name = "a"
base_url = "https://x"
models = ["m"]

[[upstreams.model_limits]]
model = "m"
rpm = 0
concurrency = 0`, `t.toml:7: upstreams[0].model_limits[0]: no limit: set rpm, tpm or concurrency > 0`},
		{"model_limits no limit inline", `
[[upstreams]]
name = "a"
base_url = "https://x"
models = ["m"]
model_limits = [{model = "m"}]`, `t.toml:6: upstreams[0].model_limits[0]: no limit: set rpm, tpm or concurrency > 0`},
		{"model_limits model missing", `
[[upstreams]]
name = "a"
base_url = "https://x"
models = ["m"]
[[upstreams.model_limits]]
rpm = 1`, `t.toml:6: upstreams[0].model_limits[0].model: must not be empty`},
		{"model_limits model empty", `
[[upstreams]]
name = "a"
base_url = "https://x"
models = ["m"]
[[upstreams.model_limits]]
rpm = 1
model = ""`, `t.toml:8: upstreams[0].model_limits[0].model: must not be empty`},
		{"model_limits model type", `
[[upstreams]]
name = "a"
base_url = "https://x"
models = ["m"]
[[upstreams.model_limits]]
model = ["m"]
rpm = 1`, `t.toml:7: upstreams[0].model_limits[0].model: must be a string (got array)`},
		{"model_limits model env missing", `
[[upstreams]]
name = "a"
base_url = "https://x"
models = ["m"]
[[upstreams.model_limits]]
model = "env:NOPE_MODEL"
rpm = 1`, `t.toml:7: upstreams[0].model_limits[0].model: environment variable NOPE_MODEL is not set`},
		{"model_limits duplicate model", `
[[upstreams]]
name = "a"
base_url = "https://x"
models = ["m", "n"]
[[upstreams.model_limits]]
model = "m"
rpm = 1
[[upstreams.model_limits]]
model = "n"
rpm = 1
[[upstreams.model_limits]]
model = "m"
tpm = 1`, `t.toml:13: upstreams[0].model_limits[2].model: duplicate model "m" (also upstreams[0].model_limits[0])`},
		{"model_limits model not routed here", `
[[upstreams]]
name = "a"
base_url = "https://x"
models = ["m"]
[[upstreams]]
name = "b"
base_url = "https://y"
models = ["gpt-4o"]
[[upstreams.model_limits]]
model = "gpt-4o-mini"
rpm = 1`, `t.toml:11: upstreams[1].model_limits[0].model: model "gpt-4o-mini" is not in upstreams[1].models, so no request for it comes here`},
		{"model_limits model of another upstream on the first", `
[[upstreams]]
name = "a"
base_url = "https://x"
[[upstreams.model_limits]]
model = "m"
rpm = 1
[[upstreams]]
name = "b"
base_url = "https://y"
models = ["m"]`, `t.toml:6: upstreams[0].model_limits[0].model: model "m" is routed to upstreams[1] (listed in its models), never to this one`},
		{"model_limits earliest line wins", `
[[upstreams]]
name = "a"
base_url = "https://x"
models = ["m"]
[[upstreams.model_limits]]
model = "m"
rpm = -1
[[upstreams]]
name = "a"
base_url = "https://y"`, `t.toml:8: upstreams[0].model_limits[0].rpm: must be >= 0 (got -1)`},

		// Tenants.
		{"tenant rpm negative (line 14)", `# comment
[node]
name = "n"

[[tenants]]
name = "a"
keys = ["ka"]

[[tenants]]
name = "b"
keys = ["kb"]
tpm = 5
concurrency = 1
rpm = -5
`, `t.toml:14: tenants[1].rpm: must be >= 0 (got -5)`},
		{"tenant name empty", `
[[tenants]]
keys = ["k"]`, `t.toml:2: tenants[0].name: must not be empty`},
		{"tenant name slash", `
[[tenants]]
name = "a/b"
keys = ["k"]`, `t.toml:3: tenants[0].name: must not contain '/', spaces or control characters (got "a/b")`},
		{"tenant name duplicate", `
[[tenants]]
name = "a"
keys = ["k1"]
[[tenants]]
name = "a"
keys = ["k2"]`, `t.toml:6: tenants[1].name: duplicate tenant name "a" (also tenants[0])`},
		{"tenant no keys", `
[[tenants]]
name = "a"`, `t.toml:2: tenants[0].keys: needs at least one key`},
		{"tenant empty keys array", `
[[tenants]]
name = "a"
keys = []`, `t.toml:4: tenants[0].keys: needs at least one key`},
		{"tenant empty key", `
[[tenants]]
name = "a"
keys = [""]`, `t.toml:4: tenants[0].keys[0]: must not be empty`},
		{"tenant key duplicate across tenants (hash form)", `
[[tenants]]
name = "a"
keys = ["k1"]
[[tenants]]
name = "b"
keys = ["other",
  "sha256:` + k1Hash + `"]`, `t.toml:8: tenants[1].keys[1]: same key as tenants[0].keys[0]`},
		{"tenant key duplicate within tenant", `
[[tenants]]
name = "a"
keys = ["k1", "k1"]`, `t.toml:4: tenants[0].keys[1]: same key as tenants[0].keys[0]`},
		{"tenant sha256 short", `
[[tenants]]
name = "a"
keys = ["sha256:abcd"]`, `t.toml:4: tenants[0].keys[0]: must be sha256:<64 hex digits> (got 4 characters)`},
		{"tenant sha256 not hex", `
[[tenants]]
name = "a"
keys = ["sha256:` + strings.Repeat("zz", 32) + `"]`, `t.toml:4: tenants[0].keys[0]: must be sha256:<64 hex digits> (not hex)`},
		{"tenant priority", `
[[tenants]]
name = "a"
keys = ["k"]
priority = "low"`, `t.toml:5: tenants[0].priority: must be "interactive" or "batch" (got "low")`},
		{"tenant mode", `
[[tenants]]
name = "a"
keys = ["k"]
mode = "dry-run"`, `t.toml:5: tenants[0].mode: must be "enforce" or "shadow" (got "dry-run")`},
		{"tenant team unknown", `
[[teams]]
name = "research"

[[tenants]]
name = "a"
keys = ["k"]
team = "reserch"`, `t.toml:8: tenants[0].team: no [[teams]] entry is named "reserch"`},
		{"team duplicate", `
[[teams]]
name = "research"

[[teams]]
name = "research"`, `t.toml:6: teams[1].name: duplicate team name "research" (also teams[0])`},
		{"team mode", `
[[teams]]
name = "research"
mode = "watch"`, `t.toml:4: teams[0].mode: must be "enforce" or "shadow" (got "watch")`},
		{"team rpm negative", `
[[teams]]
name = "research"
rpm = -1`, `t.toml:4: teams[0].rpm: must be >= 0 (got -1)`},
		{"team name with slash", `
[[teams]]
name = "a/b"`, `t.toml:3: teams[0].name: must not contain '/', spaces or control characters (got "a/b")`},
		{"team unknown key", `
[[teams]]
name = "research"
tmp = 5`, `t.toml:4: teams[0].tmp: unknown key (did you mean "tpm"?)`},
		{"tenant model limit duplicate", `
[[tenants]]
name = "a"
keys = ["k"]

[[tenants.model_limits]]
model = "gpt-4o"
rpm = 5

[[tenants.model_limits]]
model = "gpt-4o"
tpm = 5`, `t.toml:11: tenants[0].model_limits[1].model: duplicate model "gpt-4o" (also tenants[0].model_limits[0])`},
		{"tenant model limit model too long", `
[[tenants]]
name = "a"
keys = ["k"]
model_limits = [{model = "mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmm", rpm = 1}]`, `t.toml:5: tenants[0].model_limits[0].model: must be at most 120 bytes (got 121)`},
		{"team name too long", `
[[teams]]
name = "ttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttt"`, `t.toml:3: teams[0].name: must be at most 128 bytes (got 129)`},
		{"tenant model limit negative", `
[[tenants]]
name = "a"
keys = ["k"]
model_limits = [{model = "gpt-4o", tpm = -3}]`, `t.toml:5: tenants[0].model_limits[0].tpm: must be >= 0 (got -3)`},
		{"upstream mode", `
[[upstreams]]
name = "u"
base_url = "http://127.0.0.1:9"
mode = "off"`, `t.toml:5: upstreams[0].mode: must be "enforce" or "shadow" (got "off")`},
		{"tenant concurrency negative inline", `
tenants = [
  {name = "a", keys = ["k"]},
  {name = "b", keys = ["k2"], concurrency = -2},
]`, `t.toml:4: tenants[1].concurrency: must be >= 0 (got -2)`},
		{"unknown key in inline table", `
tenants = [
  {name = "a", keys = ["k"]},
  {name = "b", keys = ["k2"],
   rmp = 3},
]`, `t.toml:5: tenants[1].rmp: unknown key (did you mean "rpm"?)`},

		// env: references.
		{"env missing", `
[[upstreams]]
name = "u"
base_url = "env:NOPE_BASE"`, `t.toml:4: upstreams[0].base_url: environment variable NOPE_BASE is not set`},
		{"env missing in list", `
[[tenants]]
name = "a"
keys = ["k", "env:NOPE_KEY"]`, `t.toml:4: tenants[0].keys[1]: environment variable NOPE_KEY is not set`},
		{"env bad name", `
[node]
name = "env:1X"`, `t.toml:3: node.name: bad environment variable name "1X" after "env:"`},
		{"env value validated", `
[node]
listen = "env:BAD_LISTEN"`, `t.toml:3: node.listen: must be host:port (got "nope": missing port in address)`},

		// Earliest line wins.
		{"first error by line", `
[[tenants]]
name = "a"
keys = ["k"]
rpm = -1
[limits]
window = "0s"
[node]
listen = "x"`, `t.toml:5: tenants[0].rpm: must be >= 0 (got -1)`},

		// TOML syntax.
		{"syntax error", `
[node]
listen = "127.0.0.1:1"
gossip = 
`, `t.toml:4: invalid TOML: `},
		{"unclosed table header", `
[node
`, `t.toml:2: invalid TOML: `},
		{"duplicate key", `
[node]
listen = "127.0.0.1:1"

listen = "127.0.0.1:2"`, `t.toml:5: invalid TOML: `},
	}
	env := envMap(map[string]string{"BAD_LISTEN": "nope"})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parse([]byte(tt.doc), "t.toml", env)
			if err == nil {
				t.Fatalf("no error; got config %+v", c)
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is %T, not *Error", err, err)
			}
			got := err.Error()
			if strings.HasSuffix(tt.want, "invalid TOML: ") {
				if !strings.HasPrefix(got, tt.want) {
					t.Fatalf("got  %s\nwant prefix %s", got, tt.want)
				}
				return
			}
			if got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestSecretsNotEchoed(t *testing.T) {
	docs := []string{
		"[cluster]\nsecret = \"TOPSECRET\"",
		"[cluster]\nsecret = \"env:S\"",
		"[[tenants]]\nname = \"a\"\nkeys = [\"sha256:TOPSECRET\"]",
	}
	for _, doc := range docs {
		_, err := parse([]byte(doc), "t.toml", envMap(map[string]string{"S": "TOPSECRET"}))
		if err == nil {
			t.Fatalf("%q: no error", doc)
		}
		if strings.Contains(err.Error(), "TOPSECRET") {
			t.Errorf("%q: error echoes the secret: %v", doc, err)
		}
	}
}

// A config's fingerprint names what a cluster's nodes share: files that
// differ in per-node settings only have the same one, any change to a
// tenant, a team, an upstream or the limits another.
func TestFingerprint(t *testing.T) {
	parseOK := func(doc string) *Config {
		c, err := parse([]byte(doc), "t.toml", noEnv)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := parseOK("[node]\nname = \"a\"\nlisten = \"127.0.0.1:8081\"\n[limits]\nwindow = \"60s\"\n[[tenants]]\nname = \"x\"\nkeys = [\"k\"]\nrpm = 5\n")
	b := parseOK("[node]\nname = \"b\"\nlisten = \"127.0.0.1:8082\"\n[limits]\nwindow = \"60s\"\n[[tenants]]\nname = \"x\"\nkeys = [\"k\"]\nrpm = 5\n")
	c := parseOK("[node]\nname = \"a\"\nlisten = \"127.0.0.1:8081\"\n[limits]\nwindow = \"60s\"\n[[tenants]]\nname = \"x\"\nkeys = [\"k\"]\nrpm = 6\n")
	if f := a.Fingerprint(); len(f) != 12 || f != b.Fingerprint() || f == c.Fingerprint() {
		t.Errorf("fingerprints %q %q %q: want 12 hex digits, equal across per-node settings only", f, b.Fingerprint(), c.Fingerprint())
	}
	if got := b.RestartOnly(a); len(got) != 1 || got[0] != "node" {
		t.Errorf("RestartOnly = %v, want [node]", got)
	}
	if got := c.RestartOnly(a); len(got) != 0 {
		t.Errorf("RestartOnly of a tenant change = %v, want none", got)
	}
	// A reload applies access_log: no restart needed.
	d := parseOK("[node]\nname = \"a\"\nlisten = \"127.0.0.1:8081\"\naccess_log = true\n[limits]\nwindow = \"60s\"\n[[tenants]]\nname = \"x\"\nkeys = [\"k\"]\nrpm = 5\n")
	if got := d.RestartOnly(a); !d.Node.AccessLog || len(got) != 0 {
		t.Errorf("access_log %v, RestartOnly of it = %v, want true and none", d.Node.AccessLog, got)
	}
	// The body cap and the first completion guess are read at start: a
	// reload names them rather than drop them silently.
	e := parseOK("[node]\nname = \"a\"\nlisten = \"127.0.0.1:8081\"\n[limits]\nwindow = \"60s\"\nmax_body_bytes = 1000\ndefault_completion = 7\n[[tenants]]\nname = \"x\"\nkeys = [\"k\"]\nrpm = 5\n")
	if got := e.RestartOnly(a); strings.Join(got, ",") != "limits.max_body_bytes,limits.default_completion" {
		t.Errorf("RestartOnly of [limits] max_body_bytes and default_completion = %v", got)
	}
}

func TestDefaults(t *testing.T) {
	c, err := parse(nil, "empty.toml", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Path = "empty.toml"
	if c.Node.Name == "" || c.Node.Name != want.Node.Name {
		t.Errorf("node.name = %q, want host name %q", c.Node.Name, want.Node.Name)
	}
	c.lines, c.origin = nil, nil
	if !reflect.DeepEqual(c, want) {
		t.Errorf("empty file:\n got %+v\nwant %+v", c, want)
	}
	if err := Default().Validate(); err != nil {
		t.Errorf("Default() does not validate: %v", err)
	}
	d := Default()
	checks := []struct {
		name      string
		got, want any
	}{
		{"listen", d.Node.Listen, "127.0.0.1:8080"},
		{"gossip", d.Node.Gossip, "127.0.0.1:7946"},
		{"drain_timeout", d.Node.DrainTimeout, 30 * time.Second},
		{"header_timeout", d.Node.HeaderTimeout, 10 * time.Second},
		{"body_min_rate", d.Node.BodyMinRate, int64(4096)},
		{"body_grace", d.Node.BodyGrace, 5 * time.Second},
		{"forward_connect_timeout", d.Cluster.ForwardConnectTimeout, 15 * time.Millisecond},
		{"forward_timeout", d.Cluster.ForwardTimeout, time.Duration(0)},
		{"hop_skew", d.Cluster.HopSkew, 5 * time.Second},
		{"redis.addr", d.Redis.Addr, ""},
		{"snapshot_interval", d.Redis.SnapshotInterval, time.Second},
		{"redis.timeout", d.Redis.Timeout, 15 * time.Millisecond},
		{"handoff_wait", d.Redis.HandoffWait, 100 * time.Millisecond},
		{"window", d.Limits.Window, 60 * time.Second},
		{"slot_ttl", d.Limits.SlotTTL, 10 * time.Minute},
		{"max_body_bytes", d.Limits.MaxBodyBytes, int64(8 << 20)},
		{"default_completion", d.Limits.DefaultCompletion, 256},
		{"unknown_models", d.Limits.UnknownModels, "default"},
		{"secret", len(d.Cluster.Secret), 0},
		{"upstreams", len(d.Upstreams), 0},
		{"tenants", len(d.Tenants), 0},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("default %s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}

	c, err = parse([]byte(`
[[upstreams]]
name = "u"
base_url = "https://x.example/"
[[tenants]]
name = "t"
keys = ["k"]
`), "t.toml", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	wantU := Upstream{Name: "u", Kind: "openai", BaseURL: "https://x.example", ConnectTimeout: 2 * time.Second,
		Timeout: 600 * time.Second, StreamIdleTimeout: 120 * time.Second, AnthropicVersion: "2023-06-01",
		OnRedisDown: "share", Mode: "enforce"}
	if !reflect.DeepEqual(c.Upstreams[0], wantU) {
		t.Errorf("upstream defaults:\n got %+v\nwant %+v", c.Upstreams[0], wantU)
	}
	wantT := Tenant{Name: "t", Keys: []string{"k"}, Priority: "interactive", Mode: "enforce"}
	if !reflect.DeepEqual(c.Tenants[0], wantT) {
		t.Errorf("tenant defaults:\n got %+v\nwant %+v", c.Tenants[0], wantT)
	}
}

func TestUpstreamNewKeysDefaults(t *testing.T) {
	c, err := parse([]byte(`
[[upstreams]]
name = "u"
base_url = "https://x"
models = ["m"]
`), "t.toml", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	u := c.Upstreams[0]
	if u.OnRedisDown != "share" {
		t.Errorf("on_redis_down default %q, want %q", u.OnRedisDown, "share")
	}
	if u.ModelLimits != nil {
		t.Errorf("model_limits default %+v, want none", u.ModelLimits)
	}
	if ml, ok := u.ModelLimit("m"); ok || ml != (ModelLimit{}) {
		t.Errorf("ModelLimit(m) with no model_limits = %+v, %v", ml, ok)
	}
	if defaultUpstream().OnRedisDown != OnRedisDownShare {
		t.Error("defaultUpstream: on_redis_down not share")
	}

	// A Config built in Go leaves OnRedisDown empty: that is "share", valid.
	d := Default()
	d.Upstreams = []Upstream{{Name: "u", Kind: KindOpenAI, BaseURL: "http://127.0.0.1:9", Models: []string{"m"},
		ConnectTimeout: time.Second, Timeout: time.Second, StreamIdleTimeout: time.Second,
		ModelLimits: []ModelLimit{{Model: "m", RPM: 1}}}}
	if err := d.Validate(); err != nil {
		t.Errorf("Go-built upstream without OnRedisDown: %v", err)
	}
	d.Upstreams[0].OnRedisDown = "shared"
	if err := d.Validate(); err == nil || err.Error() != `upstreams[0].on_redis_down: must be "share", "open" or "closed" (got "shared")` {
		t.Errorf("Go-built bad OnRedisDown: %v", err)
	}
	d.Upstreams[0].OnRedisDown = OnRedisDownClosed
	d.Upstreams[0].ModelLimits = append(d.Upstreams[0].ModelLimits, ModelLimit{Model: "m", TPM: 1})
	if err := d.Validate(); err == nil || err.Error() != `upstreams[0].model_limits[1].model: duplicate model "m" (also upstreams[0].model_limits[0])` {
		t.Errorf("Go-built duplicate model limit: %v", err)
	}
}

func TestUpstreamNewKeysParse(t *testing.T) {
	doc := `
[[upstreams]]
name = "default"
base_url = "https://a"
models = ["gpt-4o", "gpt-4o-mini"]
on_redis_down = "open"

[[upstreams.model_limits]]
model = "gpt-4o"
rpm = 5000
tpm = 800000
concurrency = 0

[[upstreams.model_limits]]
model = "unlisted-model"     # the first upstream receives every unlisted model
concurrency = 4

[[upstreams]]
name = "anthropic"
kind = "anthropic"
base_url = "https://b"
models = ["claude", "env:EXTRA_MODEL"]
on_redis_down = "closed"
model_limits = [
  {model = "claude", tpm = 400000},
  {model = "env:EXTRA_MODEL", rpm = 10, tpm = 20, concurrency = 30},
]

[[upstreams]]
name = "plain"
base_url = "https://c"
on_redis_down = "share"
`
	c, err := parse([]byte(doc), "t.toml", envMap(map[string]string{"EXTRA_MODEL": "claude-extra"}))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		up          int
		onRedisDown string
		limits      []ModelLimit
	}{
		{0, OnRedisDownOpen, []ModelLimit{
			{Model: "gpt-4o", RPM: 5000, TPM: 800000},
			{Model: "unlisted-model", Concurrency: 4},
		}},
		{1, OnRedisDownClosed, []ModelLimit{
			{Model: "claude", TPM: 400000},
			{Model: "claude-extra", RPM: 10, TPM: 20, Concurrency: 30},
		}},
		{2, OnRedisDownShare, nil},
	}
	for _, tt := range tests {
		u := c.Upstreams[tt.up]
		if u.OnRedisDown != tt.onRedisDown {
			t.Errorf("upstreams[%d].on_redis_down = %q, want %q", tt.up, u.OnRedisDown, tt.onRedisDown)
		}
		if !reflect.DeepEqual(u.ModelLimits, tt.limits) {
			t.Errorf("upstreams[%d].model_limits =\n %+v\nwant %+v", tt.up, u.ModelLimits, tt.limits)
		}
	}
	// Other keys of the entries are unaffected by the sub-tables.
	if c.Upstreams[0].Name != "default" || c.Upstreams[1].Kind != KindAnthropic || len(c.Upstreams) != 3 ||
		!reflect.DeepEqual(c.Upstreams[1].Models, []string{"claude", "claude-extra"}) {
		t.Errorf("upstreams parsed oddly: %+v", c.Upstreams)
	}
}

func TestUnknownModels(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"left out", "", UnknownModelsDefault},
		{"default", "[limits]\nunknown_models = \"default\"\n", UnknownModelsDefault},
		{"refuse", "[limits]\nunknown_models = \"refuse\"\n", UnknownModelsRefuse},
	} {
		c, err := parse([]byte(tc.doc), "t.toml", noEnv)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if c.Limits.UnknownModels != tc.want {
			t.Errorf("%s: unknown_models = %q, want %q", tc.name, c.Limits.UnknownModels, tc.want)
		}
	}
	// A Config built in Go leaves UnknownModels empty: that is "default", valid.
	d := Default()
	d.Limits.UnknownModels = ""
	if err := d.Validate(); err != nil {
		t.Errorf("Go-built limits without UnknownModels: %v", err)
	}
	d.Limits.UnknownModels = "Refuse"
	if err := d.Validate(); err == nil || err.Error() != `limits.unknown_models: must be "default" or "refuse" (got "Refuse")` {
		t.Errorf("Go-built bad UnknownModels: %v", err)
	}
}

func TestModelLimitLookup(t *testing.T) {
	u := &Upstream{Name: "u", ModelLimits: []ModelLimit{
		{Model: "gpt-4o", RPM: 5000, TPM: 800000},
		{Model: "gpt-4o-mini", Concurrency: 3},
	}}
	tests := []struct {
		model  string
		want   ModelLimit
		wantOK bool
	}{
		{"gpt-4o", ModelLimit{Model: "gpt-4o", RPM: 5000, TPM: 800000}, true},
		{"gpt-4o-mini", ModelLimit{Model: "gpt-4o-mini", Concurrency: 3}, true},
		{"GPT-4o", ModelLimit{}, false}, // exact match, like routing
		{"gpt-4", ModelLimit{}, false},
		{"", ModelLimit{}, false},
	}
	for _, tt := range tests {
		got, ok := u.ModelLimit(tt.model)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("ModelLimit(%q) = %+v, %v; want %+v, %v", tt.model, got, ok, tt.want, tt.wantOK)
		}
	}
	var empty Upstream
	if _, ok := empty.ModelLimit("gpt-4o"); ok {
		t.Error("upstream without model_limits found one")
	}
	// The result is a copy: changing it leaves the config alone.
	got, _ := u.ModelLimit("gpt-4o")
	got.RPM = 1
	if u.ModelLimits[0].RPM != 5000 {
		t.Error("ModelLimit returned an alias into the config")
	}
}

func TestEnvSubstitution(t *testing.T) {
	doc := `
[node]
name = "env:NODE_NAME"
join = ["env:SEED"]
[cluster]
secret = "env:SECRET"
[admin]
token = "env:TOKEN"
[redis]
timeout = "env:REDIS_TIMEOUT"
addrs = ["env:REDIS_SENTINEL", "127.0.0.1:26380"]
master_name = "mymaster"
username = "env:REDIS_USER"
password = "env:REDIS_PASSWORD"
tls = true
tls_server_name = "redis.internal"
[[upstreams]]
name = "u"
base_url = "env:BASE"
api_key = "env:API_KEY"
[[tenants]]
name = "t"
keys = ["env:TENANT_KEY", "plain"]
`
	env := map[string]string{
		"NODE_NAME":      "n1",
		"SEED":           "10.0.0.1:7946",
		"SECRET":         secret32,
		"TOKEN":          "tok",
		"REDIS_TIMEOUT":  "20ms",
		"REDIS_SENTINEL": "127.0.0.1:26379",
		"REDIS_USER":     "ringgate",
		"REDIS_PASSWORD": "pw",
		"BASE":           "http://127.0.0.1:9000",
		"API_KEY":        "sk-up",
		"TENANT_KEY":     "sk-t",
	}
	c, err := parse([]byte(doc), "t.toml", envMap(env))
	if err != nil {
		t.Fatal(err)
	}
	if c.Node.Name != "n1" || c.Node.Join[0] != "10.0.0.1:7946" || len(c.Cluster.Secret) != 32 ||
		c.Admin.Token != "tok" || c.Redis.Timeout != 20*time.Millisecond ||
		c.Upstreams[0].BaseURL != "http://127.0.0.1:9000" || c.Upstreams[0].APIKey != "sk-up" ||
		!reflect.DeepEqual(c.Tenants[0].Keys, []string{"sk-t", "plain"}) {
		t.Errorf("substitution wrong: %+v", c)
	}
	if want := (Redis{Addrs: []string{"127.0.0.1:26379", "127.0.0.1:26380"}, MasterName: "mymaster", Username: "ringgate", Password: "pw",
		TLS: true, TLSServerName: "redis.internal"}); !reflect.DeepEqual(c.Redis.Addresses(), want.Addrs) || c.Redis.MasterName != want.MasterName ||
		c.Redis.Username != want.Username || c.Redis.Password != want.Password || !c.Redis.TLS || c.Redis.TLSServerName != want.TLSServerName || !c.Redis.Enabled() {
		t.Errorf("[redis] wrong: %+v", c.Redis)
	}

	// Secrets may come from an empty/unset variable: they are then empty.
	for _, k := range []string{"SECRET", "TOKEN", "API_KEY", "REDIS_USER", "REDIS_PASSWORD"} {
		delete(env, k)
	}
	c, err = parse([]byte(doc), "t.toml", envMap(env))
	if err != nil {
		t.Fatalf("unset secret variables: %v", err)
	}
	if c.Cluster.Secret != nil || c.Admin.Token != "" || c.Upstreams[0].APIKey != "" || c.Redis.Password != "" || c.Redis.Username != "" {
		t.Errorf("unset secrets not empty: %+v", c)
	}

	// Other keys may not.
	for k, want := range map[string]string{
		"NODE_NAME":  "t.toml:3: node.name: environment variable NODE_NAME is not set",
		"TENANT_KEY": "t.toml:23: tenants[0].keys[0]: environment variable TENANT_KEY is not set",
	} {
		e2 := map[string]string{}
		for a, b := range env {
			e2[a] = b
		}
		delete(e2, k)
		_, err := parse([]byte(doc), "t.toml", envMap(e2))
		if err == nil || err.Error() != want {
			t.Errorf("unset %s: got %v, want %s", k, err, want)
		}
	}
}

func TestParseUsesOSEnv(t *testing.T) {
	t.Setenv("RINGGATE_TEST_TOKEN", "from-os")
	c, err := Parse([]byte("[admin]\ntoken = \"env:RINGGATE_TEST_TOKEN\"\n"), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Admin.Token != "from-os" || c.Path != "t.toml" {
		t.Errorf("token %q path %q", c.Admin.Token, c.Path)
	}
}

func TestLoad(t *testing.T) {
	_, err := Load(t.TempDir() + "/missing.toml")
	if err == nil || !strings.Contains(err.Error(), "missing.toml") {
		t.Errorf("missing file: %v", err)
	}
}

func TestExample(t *testing.T) {
	env := envMap(map[string]string{
		"RINGGATE_SECRET":      secret32,
		"RINGGATE_ADMIN_TOKEN": "admin-tok",
		"OPENAI_API_KEY":       "sk-openai",
		"ANTHROPIC_API_KEY":    "sk-ant",
	})
	c, err := parse([]byte(Example), "example.toml", env)
	if err != nil {
		t.Fatal(err)
	}
	if c.Node.Name != "node-1" || len(c.Cluster.Secret) != 32 || c.Admin.Token != "admin-tok" ||
		len(c.Upstreams) != 2 || c.Upstreams[1].Kind != "anthropic" || c.Upstreams[1].APIKey != "sk-ant" ||
		len(c.Tenants) != 2 || c.Tenants[1].Priority != "batch" || c.Redis.Addr != "127.0.0.1:6379" {
		t.Errorf("example parsed oddly: %+v", c)
	}
	// The example states the slow-client defaults.
	d := Default().Node
	if c.Node.HeaderTimeout != d.HeaderTimeout || c.Node.BodyMinRate != d.BodyMinRate || c.Node.BodyGrace != d.BodyGrace {
		t.Errorf("example slow-client keys %v %d %v, defaults %v %d %v",
			c.Node.HeaderTimeout, c.Node.BodyMinRate, c.Node.BodyGrace, d.HeaderTimeout, d.BodyMinRate, d.BodyGrace)
	}
	// The example shows teams, a tenant's team and its model limits.
	if len(c.Teams) != 1 || c.Teams[0] != (Team{Name: "research", RPM: 1000, TPM: 300000, Concurrency: 20, Mode: ModeEnforce}) ||
		c.Tenants[0].Team != "research" || !reflect.DeepEqual(c.Tenants[0].ModelLimits, []ModelLimit{{Model: "gpt-4o", RPM: 60, TPM: 20000}}) ||
		c.Upstreams[0].Mode != ModeEnforce {
		t.Errorf("example teams %+v, tenant[0] team %q model_limits %+v, upstream mode %q", c.Teams, c.Tenants[0].Team, c.Tenants[0].ModelLimits, c.Upstreams[0].Mode)
	}
	// The example shows the upstream keys on_redis_down and model_limits.
	if u := c.Upstreams[0]; u.OnRedisDown != OnRedisDownShare ||
		!reflect.DeepEqual(u.ModelLimits, []ModelLimit{{Model: "gpt-4o", RPM: 5000, TPM: 800000}}) {
		t.Errorf("example upstream[0] on_redis_down %q model_limits %+v", u.OnRedisDown, u.ModelLimits)
	}
	if !strings.Contains(Example, "\non_redis_down = ") || !strings.Contains(Example, "\n[[upstreams.model_limits]]\n") {
		t.Error("example does not show on_redis_down and [[upstreams.model_limits]]")
	}
	if c.Limits.UnknownModels != UnknownModelsDefault || !strings.Contains(Example, "\nunknown_models = ") {
		t.Errorf("example does not show limits.unknown_models (parsed %q)", c.Limits.UnknownModels)
	}
	// The sha256 key in the example is that of the key named in its comment.
	hs, err := c.Tenants[1].KeyHashes()
	if err != nil || hs[0] != KeyHash([]byte("sk-nightly-1")) {
		t.Errorf("example sha256 key does not match sk-nightly-1: %v", err)
	}
	if _, err := parse([]byte(Example), "example.toml", noEnv); err != nil {
		t.Errorf("example without env: %v", err)
	}
}

func TestKeyHashes(t *testing.T) {
	tn := Tenant{Name: "a", Keys: []string{"k1", "sha256:" + k1Hash, "sha256:" + strings.ToUpper(k1Hash)}}
	hs, err := tn.KeyHashes()
	if err != nil {
		t.Fatal(err)
	}
	want := KeyHash([]byte("k1"))
	for i, h := range hs {
		if h != want {
			t.Errorf("hash %d = %x, want %x", i, h, want)
		}
	}
	if _, err := (Tenant{Name: "a", Keys: []string{"sha256:xyz"}}).KeyHashes(); err == nil {
		t.Error("bad sha256 key accepted")
	}
}

func TestKeyLines(t *testing.T) {
	doc := `a = 1
[x.y]
b = [
  1,
  [2, 3],
]
[[t]]
c = {d = 1, e.f = 2}
[[t]]
[t.sub]
g = 1
[[t.arr]]
h = 1
[[t.arr]]
h = 2
`
	lines := keyLines([]byte(doc), nil)
	want := map[string]int{
		"a": 1, "x": 2, "x.y": 2, "x.y.b": 3, "x.y.b[0]": 4, "x.y.b[1]": 5, "x.y.b[1][1]": 5,
		"t[0]": 7, "t[0].c": 8, "t[0].c.d": 8, "t[0].c.e.f": 8,
		"t[1]": 9, "t[1].sub": 10, "t[1].sub.g": 11,
		"t[1].arr[0]": 12, "t[1].arr[0].h": 13, "t[1].arr[1]": 14, "t[1].arr[1].h": 15,
	}
	for k, l := range want {
		if lines[k] != l {
			t.Errorf("line of %s = %d, want %d", k, lines[k], l)
		}
	}
}

// TestTenantTablesDecodedApart: every [[tenants]] table decodes into one
// schema reused for each; nothing of one tenant may reach the next.
func TestTenantTablesDecodedApart(t *testing.T) {
	doc := `
[[upstreams]]
name = "up"
kind = "openai"
base_url = "http://127.0.0.1:1"
models = ["gpt-4o"]

[[tenants]]
name = "a"
keys = ["ka1", "ka2"]
rpm = 5
priority = "batch"
[[tenants.model_limits]]
model = "gpt-4o"
rpm = 2

[[tenants]]
name = "b"
keys = ["kb"]
`
	c, err := Parse([]byte(doc), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	a, b := c.Tenants[0], c.Tenants[1]
	if a.Name != "a" || len(a.Keys) != 2 || a.RPM != 5 || a.Priority != "batch" || len(a.ModelLimits) != 1 {
		t.Errorf("a decoded as %+v", a)
	}
	if b.Name != "b" || len(b.Keys) != 1 || b.Keys[0] != "kb" || b.RPM != defaultTenant().RPM || b.Priority != defaultTenant().Priority || len(b.ModelLimits) != 0 {
		t.Errorf("b decoded as %+v: something of a reached it", b)
	}
}

// TestFingerprintUnchanged: the fingerprint, written a piece at a time, is
// the one a single json.Marshal of the five tables gave, so nodes of this
// version and the one before agree on a config's version during a rolling
// upgrade.
func TestFingerprintUnchanged(t *testing.T) {
	marshalled := func(c *Config) string {
		b, err := json.Marshal(struct {
			Limits    Limits
			Queue     Queue
			Upstreams []Upstream
			Teams     []Team
			Tenants   []Tenant
		}{c.Limits, c.Queue, c.Upstreams, c.Teams, c.Tenants})
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:6])
	}
	full, err := parse([]byte(`[node]
name = "a"
[limits]
window = "60s"
[[upstreams]]
name = "u"
kind = "openai"
base_url = "http://127.0.0.1:9000"
models = ["m", "<&>"]
rpm = 100
[[upstreams.model_limits]]
model = "m"
tpm = 1000
[[teams]]
name = "research"
rpm = 40
[[tenants]]
name = "x"
keys = ["k"]
rpm = 5
team = "research"
[[tenants]]
name = "y"
keys = ["k2"]
tpm = 7
concurrency = 2
priority = "batch"
mode = "shadow"
`), "t.toml", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cfg  *Config
	}{
		{"full", full},
		{"no tenants (nil)", &Config{Limits: full.Limits}},
		{"no tenants (empty)", &Config{Limits: full.Limits, Tenants: []Tenant{}}},
		{"one tenant", &Config{Tenants: full.Tenants[:1]}},
	} {
		if got, want := c.cfg.Fingerprint(), marshalled(c.cfg); got != want {
			t.Errorf("%s: fingerprint %s, want %s (json.Marshal's)", c.name, got, want)
		}
	}
}

// TestKeys: Keys lists the schema's value keys, nested tables' too, and
// no table itself; each parses in a document as the decoder wants it.
func TestKeys(t *testing.T) {
	keys := Keys()
	has := map[string]bool{}
	for _, k := range keys {
		has[k] = true
	}
	for _, k := range []string{"node.listen", "redis.tls_ca_file", "limits.unknown_models", "queue.max_depth",
		"upstreams.on_redis_down", "upstreams.model_limits.rpm", "tenants.model_limits.model", "tenants.team", "teams.mode", "admin.token"} {
		if !has[k] {
			t.Errorf("Keys() lacks %s", k)
		}
	}
	for _, table := range []string{"node", "upstreams", "tenants.model_limits", "upstreams.model_limits"} {
		if has[table] {
			t.Errorf("Keys() lists the table %s as a key", table)
		}
	}
	if len(keys) < 60 {
		t.Errorf("Keys() = %d keys, want every one: %v", len(keys), keys)
	}
}
