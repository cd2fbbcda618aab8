package config

// Example is a complete, commented config.toml showing every key with its
// default or a typical value. It parses as is; the env: values it names
// (RINGGATE_SECRET, RINGGATE_ADMIN_TOKEN, OPENAI_API_KEY, ANTHROPIC_API_KEY)
// may be unset, which leaves those secrets empty.
const Example = `# ringgate configuration. Durations are strings: "15ms", "60s", "10m".
# Any string value may be written "env:NAME" to read it from the environment;
# an unset variable is an error, except for cluster.secret, admin.token and
# upstreams api_key, which are then empty.
# Flags -node -listen -gossip -advertise -join -redis (or RINGGATE_LISTEN etc.)
# override the keys they name.

[node]
name = "node-1"               # unique in the cluster; default: the host name
listen = "127.0.0.1:8080"     # HTTP for clients, peers and admin
gossip = "127.0.0.1:7946"     # memberlist bind address (TCP and UDP)
# advertise = "10.0.0.5:7946" # gossip address peers use, if not the bind one
join = []                     # seed members' gossip addresses; empty: start a new cluster
drain_timeout = "30s"         # on SIGTERM, how long in-flight requests may take
# Slow clients get 408 and their connection closed (idle keep-alive is not cut):
header_timeout = "10s"        # max time to send a request's headers, from its first byte
body_min_rate = 4096          # bytes per second a body must keep up, after body_grace;
                              # a chunked body may take body_grace + max_body_bytes / body_min_rate
body_grace = "5s"             # time a body gets on top of its length / body_min_rate
access_log = false            # true: an "access" log line for every API request (SIGHUP applies it)

[cluster]
secret = "env:RINGGATE_SECRET"    # base64 of 32 bytes (openssl rand -base64 32); encrypts gossip, signs peer traffic
forward_connect_timeout = "15ms"  # connecting to the node that owns a tenant
forward_timeout = "0s"            # 0: forwarded requests use the upstream timeouts
hop_skew = "5s"                   # accepted clock skew on signed peer requests
handoff_timeout = "250ms"         # a new owner asking the previous owner for a moved tenant's state

[admin]
token = "env:RINGGATE_ADMIN_TOKEN" # bearer token for the admin API; empty: admin on loopback only

[redis]
addr = "127.0.0.1:6379"     # "" = no Redis (single node, demo)
snapshot_interval = "1s"    # how often tenant state is saved
timeout = "15ms"            # past this, a Redis call counts as failed
handoff_wait = "100ms"      # a new owner whose previous owner is gone waits this long for its final snapshot

[limits]
window = "60s"              # sliding window for rpm/tpm; shorter windows make limits "per window"
slot_ttl = "10m"            # a concurrency slot never released (lost stream) frees itself after this
max_body_bytes = 8388608    # larger request bodies get 413
default_completion = 256    # completion tokens assumed when a tenant/model has no history
spillover_rps = 0           # a tenant above this many requests/s is served by every node on a leased budget; 0 = never
unknown_models = "default"  # a model no upstream lists: "default" (the first upstream serves it) or "refuse" (400)

# Requests a tenant's limits refuse wait on its owner for room, by class.
[queue]
interactive_wait = "2s"     # longest an interactive request waits; 0 = refuse at once
batch_wait = "60s"          # longest a batch request waits
max_depth = 1000            # requests waiting per tenant and class; past it, 429

# Upstreams: requests whose "model" is listed go to that upstream; the first
# upstream takes all other models (limits.unknown_models = "refuse": none).
[[upstreams]]
name = "openai"
kind = "openai"                      # or "anthropic"
base_url = "https://api.openai.com"
api_key = "env:OPENAI_API_KEY"
models = ["gpt-4o", "gpt-4o-mini"]
rpm = 10000                          # the provider's own limits, shared by all tenants; 0 = none
tpm = 2000000
concurrency = 500
connect_timeout = "2s"
timeout = "600s"                     # max wait for the answer to start (a whole JSON answer)
stream_idle_timeout = "120s"         # max silence between stream chunks
on_redis_down = "share"              # while Redis is unreachable: "share" (each node keeps to its
                                     # strict local share of these limits), "open" (not enforced)
                                     # or "closed" (requests to this upstream refused)
mode = "enforce"                     # or "shadow": these limits are counted, but what they refuse is served (and logged)

# The provider's own limits for one model, on top of the upstream's; one
# [[upstreams.model_limits]] per model, after the keys of its [[upstreams]].
[[upstreams.model_limits]]
model = "gpt-4o"                     # one of this upstream's models (the first upstream: any model it gets)
rpm = 5000                           # 0 = none; at least one of rpm, tpm, concurrency > 0
tpm = 800000
concurrency = 0

[[upstreams]]
name = "anthropic"
kind = "anthropic"
base_url = "https://api.anthropic.com"
api_key = "env:ANTHROPIC_API_KEY"
models = ["claude-sonnet-4-5", "claude-haiku-4-5"]
rpm = 4000
tpm = 400000
concurrency = 0
anthropic_version = "2023-06-01"

# Teams: limits several tenants share (0 = no limit). A request of a tenant
# with team = "..." is admitted only if the tenant and its team both have
# room, and counts on both. A team's tenants share one owner node.
[[teams]]
name = "research"
rpm = 1000
tpm = 300000
concurrency = 20
mode = "enforce"             # or "shadow"

# Tenants: clients, each with bearer keys and limits (0 = no limit).
[[tenants]]
name = "acme"
keys = ["sk-acme-1"]         # plain keys, or "sha256:<hex>" of the key
rpm = 600
tpm = 100000
concurrency = 10
priority = "interactive"     # or "batch": queued behind interactive traffic
mode = "enforce"             # or "shadow": decided and counted, but refusals are served (and logged)
team = "research"            # optional: its requests count on the team's limits too

# The tenant's own limit on one model, on top of its overall limits; one
# [[tenants.model_limits]] per model, after the keys of its [[tenants]].
[[tenants.model_limits]]
model = "gpt-4o"
rpm = 60
tpm = 20000
concurrency = 0

[[tenants]]
name = "nightly-jobs"
# sha256 of "sk-nightly-1"; generate with: printf %s KEY | sha256sum
keys = ["sha256:420609a7f57264d1831e47c76baa8d2ffebb7d429420ff5b175ce8cd940fc34f"]
rpm = 60
tpm = 1000000
concurrency = 2
priority = "batch"
batch_wait = "5m"           # this tenant's own wait budget (interactive_wait too)
`
