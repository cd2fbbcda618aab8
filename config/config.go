// Package config owns ringgate's configuration: the TOML file format, its
// defaults, its validation, and the command-line flag and RINGGATE_*
// environment overrides applied on top of it.
//
// It produces a plain, validated [Config] value and nothing else. It knows
// nothing of HTTP, gossip, Redis clients or limiters: those packages read the
// fields they need from a Config.
//
// # Errors
//
// A bad file is reported as one short message naming the file, line and key,
// for example
//
//	config.toml:14: tenants[1].rpm: must be >= 0 (got -5)
//
// When a file has several problems, the one on the earliest line is reported.
// Values that came from a flag or an environment override name that instead
// of a file line ("flag -listen: node.listen: ..."). Errors are *[Error]
// values. Secret values (cluster.secret, admin.token, api_key, tenant keys)
// are never echoed in messages.
//
// # env: values
//
// Any string value written "env:NAME" (NAME a shell-style variable name) is
// replaced by that environment variable. A missing or empty variable is an
// error naming the key and line, except for the secrets (cluster.secret,
// admin.token, upstreams[].api_key, redis.username, redis.password), where
// an empty variable means an empty value (no gossip encryption /
// loopback-only admin / no upstream key / ...), so that a single config file
// serves both development and production; [Config.Warnings] names each
// such key, for the node to log. There is no escape for a literal string
// starting with "env:".
//
// # Warnings
//
// A valid config may hold settings that cannot take effect (spillover
// without Redis, gossip with nothing to join, ...). They do not stop
// start-up: [Config.Warnings] lists them, with file, line and key.
//
// # Durations and limits
//
// Durations are TOML strings in Go syntax ("60s", "15ms", "1m30s"). Integer
// limits (rpm, tpm, concurrency) of 0 mean "no limit on that dimension".
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"
)

// Config is a complete, validated ringgate configuration.
type Config struct {
	Node      Node
	Cluster   Cluster
	Admin     Admin
	Redis     Redis
	Limits    Limits
	Queue     Queue
	Upstreams []Upstream
	Teams     []Team
	Tenants   []Tenant

	Path string // file it was loaded from; "" for Default()

	// lines maps key paths ("tenants[1].rpm") to the line they were
	// written on, made from the file's text when an error first needs it
	// (a config of 100 000 tenants has 600 000 paths); origin maps key
	// paths set by a flag or env override to a label ("flag -listen").
	// Both only feed error messages. written are the paths of keys whose
	// presence matters although their value is the zero one. unsetEnv
	// maps the path of each secret written "env:NAME" whose variable was
	// unset or empty to NAME, for Warnings.
	lines    *lazyLines
	origin   map[string]string
	written  map[string]bool
	unsetEnv map[string]string
}

// lazyLines is keyLines of a document, made once when first asked.
type lazyLines struct {
	once  sync.Once
	data  []byte
	lines map[string]int
}

// line is the line key path p was written on (0 when it was not).
func (l *lazyLines) line(p string) (int, bool) {
	if l == nil {
		return 0, false
	}
	l.once.Do(func() { l.lines, l.data = keyLines(l.data, nil), nil })
	n, ok := l.lines[p]
	return n, ok
}

// only is a copy of l that knows the lines of paths (and of their
// enclosing tables) alone. It reads the document for those only, and
// spends l: l knows no lines after it.
func (l *lazyLines) only(paths []string) *lazyLines {
	if l == nil {
		return nil
	}
	want := map[string]bool{}
	for _, p := range paths {
		for q := p; q != ""; q = parentPath(q) {
			want[q] = true
		}
	}
	var lines map[string]int
	l.once.Do(func() { lines, l.data = keyLines(l.data, want), nil })
	if lines == nil { // all of them were read before
		lines = map[string]int{}
		for p := range want {
			if n, ok := l.lines[p]; ok {
				lines[p] = n
			}
		}
	}
	kept := &lazyLines{lines: lines}
	kept.once.Do(func() {})
	return kept
}

// Node is the [node] table: this process's identity and addresses.
type Node struct {
	Name      string   // name; default os.Hostname()
	Listen    string   // listen: HTTP host:port for clients, peers and admin
	Gossip    string   // gossip: memberlist bind host:port
	Advertise string   // advertise: gossip host:port peers use; "" = Gossip
	Join      []string // join: seed members' gossip addresses; empty = new cluster

	DrainTimeout time.Duration // drain_timeout, default 30s

	// Slow clients. HeaderTimeout (header_timeout, default 10s) bounds the
	// wait for a request's headers, from its first byte (on a new
	// connection, from the accept). The body then has BodyGrace
	// (body_grace, default 5s) plus its length at BodyMinRate bytes per
	// second (body_min_rate, default 4096); a chunked body, whose length is
	// unknown, is allowed limits.max_body_bytes at that rate. A client that
	// is slower gets 408 and its connection closed. Idle keep-alive
	// connections are not affected.
	HeaderTimeout time.Duration
	BodyMinRate   int64
	BodyGrace     time.Duration

	// AccessLog (access_log, default false) writes an "access" line for
	// every API request. A reload applies it.
	AccessLog bool
}

// Cluster is the [cluster] table: settings shared by all members.
type Cluster struct {
	// Secret (key secret) is base64 of exactly 32 bytes; it encrypts gossip
	// and signs peer traffic. Empty is allowed (single node, tests).
	Secret []byte

	ForwardConnectTimeout time.Duration // forward_connect_timeout, default 15ms
	ForwardTimeout        time.Duration // forward_timeout, default 0 = use upstream timeouts
	HopSkew               time.Duration // hop_skew, default 5s
	// HandoffFetchTimeout (handoff_timeout, default 250ms) bounds a new
	// owner's request for a tenant's state to its previous owner.
	HandoffFetchTimeout time.Duration
}

// Admin is the [admin] table.
type Admin struct {
	Token string // token: bearer token for the admin API; "" = admin on loopback only
}

// Redis is the [redis] table.
type Redis struct {
	Addr             string        // addr: host:port; "" = no Redis
	SnapshotInterval time.Duration // snapshot_interval, default 1s
	Timeout          time.Duration // timeout, default 15ms: past this a call counts as failed
	HandoffWait      time.Duration // handoff_wait, default 100ms

	// Redis as production runs it. Addrs (addrs) lists several nodes of a
	// Redis Cluster, or with MasterName (master_name) the Sentinels of a
	// replicated master; one address in either addr or addrs is a plain
	// Redis. Username and Password (username, password; env: values)
	// authenticate (ACL user, or the default user's password). TLS (tls)
	// connects over TLS, verified against TLSCAFile (tls_ca_file, PEM; the
	// system's roots without it) for TLSServerName (tls_server_name; the
	// address's host without it).
	Addrs         []string
	MasterName    string
	Username      string
	Password      string
	TLS           bool
	TLSCAFile     string
	TLSServerName string
}

// Enabled reports whether a Redis is configured.
func (r Redis) Enabled() bool { return r.Addr != "" || len(r.Addrs) > 0 }

// Addresses is where Redis is: addrs, or addr alone.
func (r Redis) Addresses() []string {
	if len(r.Addrs) > 0 {
		return r.Addrs
	}
	if r.Addr != "" {
		return []string{r.Addr}
	}
	return nil
}

// Limits is the [limits] table: gateway-wide limiter settings.
type Limits struct {
	Window       time.Duration // window, default 60s: sliding window for rpm/tpm
	SlotTTL      time.Duration // slot_ttl, default 10m
	MaxBodyBytes int64         // max_body_bytes, default 8 MiB

	// DefaultCompletion (default_completion, default 256) is the expected
	// number of completion tokens when a tenant/model has no history.
	DefaultCompletion int

	// SpilloverRPS (spillover_rps, default 0: never) is the request rate
	// (requests per second, at its owner and, once spilled, cluster-wide)
	// above which a tenant is served by every node on a budget leased
	// from Redis instead of by its owner alone; it goes back to its owner
	// below half of it. Needs Redis and cluster.secret.
	SpilloverRPS int

	// UnknownModels (unknown_models, default "default") is what happens to
	// a request for a model no upstream lists: UnknownModelsDefault (the
	// first upstream serves it) or UnknownModelsRefuse (a 400 that names
	// the model). "" (a Config built in Go that leaves it out) means
	// UnknownModelsDefault.
	UnknownModels string
}

// Queue is the [queue] table: how long a request refused by its tenant's
// limits may wait for room, by class, and how many may wait.
type Queue struct {
	InteractiveWait time.Duration // interactive_wait, default 2s; 0: refuse at once
	BatchWait       time.Duration // batch_wait, default 60s; 0: refuse at once
	MaxDepth        int           // max_depth, default 1000: waiting per tenant and class
}

// Upstream is one [[upstreams]] entry: an LLM provider endpoint.
type Upstream struct {
	Name    string   // name, unique, required
	Kind    string   // kind: "openai" (default) or "anthropic"
	BaseURL string   // base_url: absolute http(s) URL, trailing "/" removed
	APIKey  string   // api_key; may be empty
	Models  []string // models routed here; the first upstream is the default

	RPM, TPM, Concurrency int // the provider's own limits; 0 = none

	// ModelLimits ([[upstreams.model_limits]]) are the provider's own limits
	// for single models, on top of RPM/TPM/Concurrency. Each names a model
	// routed to this upstream, at most once. Look one up with ModelLimit.
	ModelLimits []ModelLimit

	// OnRedisDown (on_redis_down, default "share") is what the upstream's
	// limits do while Redis cannot be reached: OnRedisDownShare (each node
	// keeps to its strict local share), OnRedisDownOpen or OnRedisDownClosed.
	// Parsed configs always hold one of these; "" (a Config built in Go
	// that leaves it out) is valid and means OnRedisDownShare.
	OnRedisDown string

	// Mode (mode) is ModeEnforce (default; "" too) or ModeShadow: the
	// provider's limits above are leased and counted as enforced, but
	// what they refuse is served (and logged, counted, marked).
	Mode string

	ConnectTimeout    time.Duration // connect_timeout, default 2s
	Timeout           time.Duration // timeout, default 600s: max wait for response headers / a whole JSON body
	StreamIdleTimeout time.Duration // stream_idle_timeout, default 120s: max silence between stream chunks
	AnthropicVersion  string        // anthropic_version, default "2023-06-01"
}

// ModelLimit is one [[upstreams.model_limits]] entry: a provider's own limits
// for one model. 0 = no limit on that dimension; at least one is > 0.
type ModelLimit struct {
	Model                 string // model, required
	RPM, TPM, Concurrency int
}

// ModelLimit returns the limits u has for model (matched exactly, like
// routing), and whether it has any.
func (u *Upstream) ModelLimit(model string) (ModelLimit, bool) {
	for _, ml := range u.ModelLimits {
		if ml.Model == model {
			return ml, true
		}
	}
	return ModelLimit{}, false
}

// Tenant is one [[tenants]] entry: a client with its keys and limits.
type Tenant struct {
	Name string
	// Keys are the client bearer keys, either plain or "sha256:<64 hex>"
	// (the SHA-256 of the plain key). Use KeyHashes to match them.
	Keys                  []string
	RPM, TPM, Concurrency int    // 0 = no limit on that dimension
	Priority              string // "interactive" (default) or "batch"
	// Mode is ModeEnforce (default; "" too) or ModeShadow: the tenant's limits
	// decide and count as enforced, but what they refuse is served
	// (and logged, counted, marked).
	Mode string
	// InteractiveWait and BatchWait (interactive_wait, batch_wait)
	// override [queue]'s for this tenant; 0: not set.
	InteractiveWait, BatchWait time.Duration
	// Team names the [[teams]] entry whose limits the tenant's requests
	// count on too; "" for none.
	Team string
	// ModelLimits ([[tenants.model_limits]]) are the tenant's own limits
	// on one model, on top of its overall limits; at most one per model.
	ModelLimits []ModelLimit
}

// Team is one [[teams]] entry: limits that several tenants share. A
// request of a tenant with team = Name is admitted only if the tenant and
// the team both have room, and is charged on both.
type Team struct {
	Name                  string
	RPM, TPM, Concurrency int    // 0 = no limit on that dimension
	Mode                  string // ModeEnforce (default; "" too) or ModeShadow
}

// Team returns the team named name.
func (c *Config) Team(name string) (Team, bool) {
	for _, t := range c.Teams {
		if t.Name == name {
			return t, true
		}
	}
	return Team{}, false
}

// Waits are the tenant's wait budgets: its own, else q's.
func (t *Tenant) Waits(q Queue) (interactive, batch time.Duration) {
	interactive, batch = q.InteractiveWait, q.BatchWait
	if t.InteractiveWait > 0 {
		interactive = t.InteractiveWait
	}
	if t.BatchWait > 0 {
		batch = t.BatchWait
	}
	return interactive, batch
}

// Name lengths: a tenant's per-model limit is kept under the name
// "<tenant>/model/<model>", which must fit the 256 bytes a snapshot or a
// handoff carries for a name.
const (
	MaxNameBytes  = 128 // upstream, team and tenant names
	MaxModelBytes = 120 // the model of a [[tenants.model_limits]] entry
)

// Upstream kinds, upstream on_redis_down values, tenant priorities, modes
// and limits.unknown_models values.
const (
	KindOpenAI          = "openai"
	KindAnthropic       = "anthropic"
	OnRedisDownShare    = "share"  // strict local share of the upstream's limits
	OnRedisDownOpen     = "open"   // upstream limits not enforced
	OnRedisDownClosed   = "closed" // requests to the upstream refused
	PriorityInteractive = "interactive"
	PriorityBatch       = "batch"
	ModeEnforce         = "enforce"
	ModeShadow          = "shadow"

	UnknownModelsDefault = "default" // the first upstream serves any model no upstream lists
	UnknownModelsRefuse  = "refuse"  // a request for a model no upstream lists gets a 400
)

// Default values.
const (
	DefaultListen           = "127.0.0.1:8080"
	DefaultGossip           = "127.0.0.1:7946"
	DefaultAnthropicVersion = "2023-06-01"
	DefaultMaxBodyBytes     = 8 << 20
)

// Default returns a usable single-node configuration: listen on
// 127.0.0.1:8080, gossip on 127.0.0.1:7946, no Redis, no secret, no
// upstreams and no tenants. Node.Name is the host name ("ringgate" if it
// cannot be read).
func Default() *Config {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "ringgate"
	}
	return &Config{
		Node: Node{
			Name:         name,
			Listen:       DefaultListen,
			Gossip:       DefaultGossip,
			DrainTimeout: 30 * time.Second,

			HeaderTimeout: 10 * time.Second,
			BodyMinRate:   4096,
			BodyGrace:     5 * time.Second,
		},
		Cluster: Cluster{
			ForwardConnectTimeout: 15 * time.Millisecond,
			HopSkew:               5 * time.Second,
			HandoffFetchTimeout:   250 * time.Millisecond,
		},
		Redis: Redis{
			SnapshotInterval: time.Second,
			Timeout:          15 * time.Millisecond,
			HandoffWait:      100 * time.Millisecond,
		},
		Limits: Limits{
			Window:            60 * time.Second,
			SlotTTL:           10 * time.Minute,
			MaxBodyBytes:      DefaultMaxBodyBytes,
			DefaultCompletion: 256,
			UnknownModels:     UnknownModelsDefault,
		},
		Queue: Queue{InteractiveWait: 2 * time.Second, BatchWait: 60 * time.Second, MaxDepth: 1000},
	}
}

func defaultUpstream() Upstream {
	return Upstream{
		Kind:              KindOpenAI,
		ConnectTimeout:    2 * time.Second,
		Timeout:           600 * time.Second,
		StreamIdleTimeout: 120 * time.Second,
		AnthropicVersion:  DefaultAnthropicVersion,
		OnRedisDown:       OnRedisDownShare,
		Mode:              ModeEnforce,
	}
}

func defaultTeam() Team {
	return Team{Mode: ModeEnforce}
}

func defaultTenant() Tenant {
	return Tenant{Priority: PriorityInteractive, Mode: ModeEnforce}
}

// Load reads and parses the file at path. env: values are read with
// os.Getenv.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, path)
}

// Parse decodes a TOML document, applies defaults and validates the result.
// name is the file name used in error messages and stored in Config.Path.
// env: values are read with os.Getenv.
func Parse(data []byte, name string) (*Config, error) {
	return parse(data, name, os.Getenv)
}

func parse(data []byte, name string, getenv func(string) string) (*Config, error) {
	c, err := decode(data, name, getenv)
	if err != nil {
		return nil, err
	}
	if err := c.finish(); err != nil {
		return nil, err
	}
	return c, nil
}

// finish fills the defaults that depend on the host and validates.
func (c *Config) finish() error {
	if c.Node.Name == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			return c.errAt("node.name", "not set and the host name is unknown")
		}
		c.Node.Name = h
	}
	if err := c.Validate(); err != nil {
		return err
	}
	// The file's text serves messages only: a valid config does not keep
	// it (8.8 MB for 100 000 tenants), only, when it has warnings, the
	// lines of the keys they name (finding those reads the text: a config
	// without warnings does not). A later Validate names the other keys
	// without their line.
	all := c.lines
	c.lines = nil
	if len(c.Warnings()) > 0 {
		c.lines = all.only(warningKeys(c))
	}
	return nil
}

// KeyHash returns the SHA-256 of a key as presented by a client. Tenants are
// looked up by this hash, never by comparing plaintext.
func KeyHash(presented []byte) [32]byte {
	return sha256.Sum256(presented)
}

// KeyHashes returns the hash of each of t.Keys, in order: plain keys are
// hashed with KeyHash, "sha256:<64 hex>" keys are decoded.
func (t Tenant) KeyHashes() ([][32]byte, error) {
	out := make([][32]byte, 0, len(t.Keys))
	for i, k := range t.Keys {
		h, err := keyHash(k)
		if err != nil {
			return nil, fmt.Errorf("tenant %q: keys[%d]: %s", t.Name, i, err)
		}
		out = append(out, h)
	}
	return out, nil
}

const hashPrefix = "sha256:"

// keyHash's messages never contain the key itself.
func keyHash(k string) ([32]byte, error) {
	var h [32]byte
	if hexs, ok := strings.CutPrefix(k, hashPrefix); ok {
		if len(hexs) != 64 {
			return h, fmt.Errorf("must be sha256:<64 hex digits> (got %d characters)", len(hexs))
		}
		if _, err := hex.Decode(h[:], []byte(hexs)); err != nil {
			return h, fmt.Errorf("must be sha256:<64 hex digits> (not hex)")
		}
		return h, nil
	}
	if k == "" {
		return h, fmt.Errorf("must not be empty")
	}
	return KeyHash([]byte(k)), nil
}

// Fingerprint names the settings every node of a cluster should share —
// [limits], [queue], [[upstreams]], [[teams]], [[tenants]], as they stand
// once env: values are read — as the first 12 hex digits of a SHA-256 of
// them. Nodes gossip it (/cluster: config_version), so an operator sees a
// rolling reload half done; files that differ only in per-node settings
// ([node], [cluster], [admin], [redis]) have the same one.
//
// The hash is of the JSON of a struct of those five fields, written a
// piece at a time: one json.Marshal of 100 000 tenants spent most of a
// node's start-up growing its buffer (0.9 s of 1.2 s), and the bytes, so
// the fingerprint, are the same as that Marshal's.
func (c *Config) Fingerprint() string {
	h := sha256.New()
	part := func(prefix string, v any) bool {
		b, err := json.Marshal(v)
		if err != nil {
			return false
		}
		h.Write([]byte(prefix))
		h.Write(b)
		return true
	}
	if !part(`{"Limits":`, c.Limits) || !part(`,"Queue":`, c.Queue) ||
		!part(`,"Upstreams":`, c.Upstreams) || !part(`,"Teams":`, c.Teams) {
		return ""
	}
	if c.Tenants == nil {
		h.Write([]byte(`,"Tenants":null}`))
	} else {
		h.Write([]byte(`,"Tenants":[`))
		for i := range c.Tenants {
			sep := ","
			if i == 0 {
				sep = ""
			}
			if !part(sep, &c.Tenants[i]) {
				return ""
			}
		}
		h.Write([]byte(`]}`))
	}
	return hex.EncodeToString(h.Sum(nil)[:6])
}

// RestartOnly names what differs between c and running that a reload does
// not apply, being read at start only: the tables [node] (but its
// body_grace, body_min_rate and access_log), [cluster] and [redis], and
// the keys limits.max_body_bytes (the server's body cap) and
// limits.default_completion (the token estimator's first guess). A reload
// that changes them runs on the old values until a restart.
func (c *Config) RestartOnly(running *Config) []string {
	var out []string
	n, r := c.Node, running.Node
	n.BodyGrace, n.BodyMinRate, r.BodyGrace, r.BodyMinRate = 0, 0, 0, 0
	n.AccessLog, r.AccessLog = false, false
	if !reflect.DeepEqual(n, r) {
		out = append(out, "node")
	}
	if !reflect.DeepEqual(c.Cluster, running.Cluster) {
		out = append(out, "cluster")
	}
	if !reflect.DeepEqual(c.Redis, running.Redis) {
		out = append(out, "redis")
	}
	if c.Limits.MaxBodyBytes != running.Limits.MaxBodyBytes {
		out = append(out, "limits.max_body_bytes")
	}
	if c.Limits.DefaultCompletion != running.Limits.DefaultCompletion {
		out = append(out, "limits.default_completion")
	}
	return out
}
