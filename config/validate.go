package config

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Validate checks c and returns the problem on the earliest line of its
// file (an *Error), or nil. Parse, Load and FromArgs call it; call it again
// after changing a Config by hand.
func (c *Config) Validate() error {
	v := &validator{c: c}
	v.node()
	v.cluster()
	v.redis()
	v.limits()
	v.nonNegative("queue.interactive_wait", v.c.Queue.InteractiveWait)
	v.nonNegative("queue.batch_wait", v.c.Queue.BatchWait)
	v.limit("queue.max_depth", v.c.Queue.MaxDepth)
	v.upstreams()
	v.teams()
	v.tenants()
	return firstError(v.errs)
}

type validator struct {
	c    *Config
	errs []*Error
}

func (v *validator) errf(path, format string, args ...any) {
	v.errs = append(v.errs, v.c.errAt(path, format, args...))
}

// hostPort checks a host:port address; needHost rejects ":port".
func (v *validator) hostPort(path, s string, needHost bool) {
	if s == "" {
		v.errf(path, "must be host:port (got nothing)")
		return
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		msg := err.Error()
		if ae, ok := err.(*net.AddrError); ok {
			msg = ae.Err
		}
		v.errf(path, "must be host:port (got %q: %s)", s, msg)
		return
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		v.errf(path, "port must be a number 0-65535 (got %q)", s)
		return
	}
	if needHost && host == "" {
		v.errf(path, "needs a host, not just a port (got %q)", s)
	}
}

func (v *validator) positive(path string, d time.Duration) {
	if d <= 0 {
		v.errf(path, "must be > 0 (got %s)", d)
	}
}

func (v *validator) nonNegative(path string, d time.Duration) {
	if d < 0 {
		v.errf(path, "must be >= 0 (got %s)", d)
	}
}

func (v *validator) limit(path string, n int) {
	if n < 0 {
		v.errf(path, "must be >= 0 (got %d)", n)
	}
}

// name checks an upstream or tenant name: it appears in URLs, logs and
// metric labels.
func (v *validator) name(path, s string) bool {
	if s == "" {
		v.errf(path, "must not be empty")
		return false
	}
	if len(s) > MaxNameBytes {
		v.errf(path, "must be at most %d bytes (got %d)", MaxNameBytes, len(s))
		return false
	}
	for _, r := range s {
		if r == '/' || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			v.errf(path, "must not contain '/', spaces or control characters (got %q)", s)
			return false
		}
	}
	return true
}

func (v *validator) node() {
	n := v.c.Node
	if n.Name == "" {
		v.errf("node.name", "must not be empty")
	}
	v.hostPort("node.listen", n.Listen, false)
	// An empty gossip address runs the node standalone: no cluster, it
	// enforces every tenant itself.
	if n.Gossip != "" {
		v.hostPort("node.gossip", n.Gossip, false)
	} else if len(n.Join) > 0 {
		v.errf("node.join", "needs node.gossip: a standalone node (gossip = \"\") cannot join a cluster")
	}
	if n.Advertise != "" {
		v.hostPort("node.advertise", n.Advertise, true)
	}
	for i, j := range n.Join {
		v.hostPort(fmt.Sprintf("node.join[%d]", i), j, true)
	}
	v.nonNegative("node.drain_timeout", n.DrainTimeout)
	v.positive("node.header_timeout", n.HeaderTimeout)
	if n.BodyMinRate <= 0 {
		v.errf("node.body_min_rate", "must be > 0 bytes per second (got %d)", n.BodyMinRate)
	}
	v.positive("node.body_grace", n.BodyGrace)
}

func (v *validator) cluster() {
	c := v.c.Cluster
	if len(c.Secret) != 0 && len(c.Secret) != 32 {
		v.errf("cluster.secret", "must be base64 of exactly 32 bytes (got %d bytes; try: openssl rand -base64 32)", len(c.Secret))
	}
	v.positive("cluster.forward_connect_timeout", c.ForwardConnectTimeout)
	v.nonNegative("cluster.forward_timeout", c.ForwardTimeout)
	v.positive("cluster.hop_skew", c.HopSkew)
	v.positive("cluster.handoff_timeout", c.HandoffFetchTimeout)
}

func (v *validator) redis() {
	r := v.c.Redis
	if r.Addr != "" {
		v.hostPort("redis.addr", r.Addr, false)
	}
	if r.Addr != "" && len(r.Addrs) > 0 {
		v.errf("redis.addrs", "set either redis.addr (one Redis) or redis.addrs, not both")
	}
	for i, a := range r.Addrs {
		v.hostPort(fmt.Sprintf("redis.addrs[%d]", i), a, true)
	}
	if r.MasterName != "" && len(r.Addrs) == 0 && r.Addr == "" {
		v.errf("redis.master_name", "needs the Sentinels' addresses in redis.addrs")
	}
	if !r.Enabled() {
		for key, set := range map[string]bool{"redis.username": r.Username != "", "redis.password": r.Password != "", "redis.tls": r.TLS} {
			if set {
				v.errf(key, "set without redis.addr or redis.addrs")
			}
		}
	}
	if !r.TLS && (r.TLSCAFile != "" || r.TLSServerName != "") {
		key := "redis.tls_ca_file"
		if r.TLSCAFile == "" {
			key = "redis.tls_server_name"
		}
		v.errf(key, "set with redis.tls = false: set redis.tls = true to connect over TLS")
	}
	if r.TLSCAFile != "" {
		pem, err := os.ReadFile(r.TLSCAFile)
		switch {
		case err != nil:
			v.errf("redis.tls_ca_file", "cannot read %q: %v", r.TLSCAFile, errors.Unwrap(err))
		case !x509.NewCertPool().AppendCertsFromPEM(pem):
			v.errf("redis.tls_ca_file", "%q holds no PEM certificate", r.TLSCAFile)
		}
	}
	v.positive("redis.snapshot_interval", r.SnapshotInterval)
	v.positive("redis.timeout", r.Timeout)
	v.nonNegative("redis.handoff_wait", r.HandoffWait)
}

func (v *validator) limits() {
	l := v.c.Limits
	v.positive("limits.window", l.Window)
	v.positive("limits.slot_ttl", l.SlotTTL)
	if l.MaxBodyBytes <= 0 {
		v.errf("limits.max_body_bytes", "must be > 0 (got %d)", l.MaxBodyBytes)
	}
	v.limit("limits.default_completion", l.DefaultCompletion)
	v.limit("limits.spillover_rps", l.SpilloverRPS)
	switch l.UnknownModels {
	case UnknownModelsDefault, UnknownModelsRefuse:
	case "":
		// The zero value of a Config built in Go means "default"; in a
		// file, the key is either left out (default) or set to a value.
		if !v.c.written["limits.unknown_models"] {
			break
		}
		fallthrough
	default:
		v.errf("limits.unknown_models", "must be %q or %q (got %q)", UnknownModelsDefault, UnknownModelsRefuse, l.UnknownModels)
	}
}

func (v *validator) upstreams() {
	names := map[string]int{}
	models := map[string]string{} // model -> path that listed it first
	routed := map[string]int{}    // model -> upstream that listed it first
	for i, u := range v.c.Upstreams {
		for _, m := range u.Models {
			if _, dup := routed[m]; !dup && m != "" {
				routed[m] = i
			}
		}
	}
	for i, u := range v.c.Upstreams {
		p := fmt.Sprintf("upstreams[%d]", i)
		v.uniqueName(p+".name", "upstream", "upstreams", u.Name, i, names)
		switch u.Kind {
		case KindOpenAI, KindAnthropic:
		default:
			v.errf(p+".kind", "must be %q or %q (got %q)", KindOpenAI, KindAnthropic, u.Kind)
		}
		v.baseURL(p+".base_url", u.BaseURL)
		for k, m := range u.Models {
			mp := fmt.Sprintf("%s.models[%d]", p, k)
			if m == "" {
				v.errf(mp, "must not be empty")
				continue
			}
			if prev, dup := models[m]; dup {
				v.errf(mp, "model %q is already listed by %s", m, prev)
				continue
			}
			models[m] = mp
		}
		v.limit(p+".rpm", u.RPM)
		v.limit(p+".tpm", u.TPM)
		v.limit(p+".concurrency", u.Concurrency)
		v.positive(p+".connect_timeout", u.ConnectTimeout)
		v.positive(p+".timeout", u.Timeout)
		v.positive(p+".stream_idle_timeout", u.StreamIdleTimeout)
		if u.Kind == KindAnthropic && u.AnthropicVersion == "" {
			v.errf(p+".anthropic_version", "must not be empty")
		}
		v.modelLimits(p, i, u, routed)
		switch u.OnRedisDown {
		case OnRedisDownShare, OnRedisDownOpen, OnRedisDownClosed:
		case "":
			// The zero value of a Config built in Go means "share"; in a
			// file, the key is either left out (default) or set to a value.
			if !v.c.written[p+".on_redis_down"] {
				break
			}
			fallthrough
		default:
			v.errf(p+".on_redis_down", "must be %q, %q or %q (got %q)", OnRedisDownShare, OnRedisDownOpen, OnRedisDownClosed, u.OnRedisDown)
		}
		v.mode(p+".mode", u.Mode)
	}
}

// modelLimits checks the model_limits of upstreams[i] (path p). Each must
// name a model that is routed to this upstream: one of its models, or, for
// the first upstream (the default) while limits.unknown_models is not
// "refuse", any model no other upstream lists. A limit on a model that
// never comes here is a typo or a misplaced entry.
func (v *validator) modelLimits(p string, i int, u Upstream, routed map[string]int) {
	seen := map[string]int{} // model -> index of its first entry
	for k, ml := range u.ModelLimits {
		lp := fmt.Sprintf("%s.model_limits[%d]", p, k)
		first, dup := seen[ml.Model]
		j, listed := routed[ml.Model]
		switch {
		case ml.Model == "":
			v.errf(lp+".model", "must not be empty")
		case dup:
			v.errf(lp+".model", "duplicate model %q (also %s.model_limits[%d])", ml.Model, p, first)
		case slices.Contains(u.Models, ml.Model):
		case i == 0 && listed:
			v.errf(lp+".model", "model %q is routed to upstreams[%d] (listed in its models), never to this one", ml.Model, j)
		case i > 0:
			v.errf(lp+".model", "model %q is not in %s.models, so no request for it comes here", ml.Model, p)
		case v.c.Limits.UnknownModels == UnknownModelsRefuse:
			v.errf(lp+".model", "model %q is not in %s.models and limits.unknown_models is %q, so no request for it comes here", ml.Model, p, UnknownModelsRefuse)
		}
		if ml.Model != "" && !dup {
			seen[ml.Model] = k
		}
		v.limit(lp+".rpm", ml.RPM)
		v.limit(lp+".tpm", ml.TPM)
		v.limit(lp+".concurrency", ml.Concurrency)
		if ml.RPM == 0 && ml.TPM == 0 && ml.Concurrency == 0 {
			v.errf(lp, "no limit: set rpm, tpm or concurrency > 0")
		}
	}
}

func (v *validator) baseURL(path, s string) {
	if s == "" {
		v.errf(path, "must be set to an http:// or https:// URL")
		return
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.errf(path, "must be an absolute http:// or https:// URL (got %q)", s)
		return
	}
	if u.RawQuery != "" || u.Fragment != "" || strings.Contains(s, "#") {
		v.errf(path, "must not have a query or fragment (got %q)", s)
	}
}

func (v *validator) tenants() {
	names := map[string]int{}
	keys := map[[32]byte]string{} // key hash -> path that listed it first
	for i, t := range v.c.Tenants {
		p := "tenants[" + strconv.Itoa(i) + "]"
		v.uniqueName(p+".name", "tenant", "tenants", t.Name, i, names)
		if len(t.Keys) == 0 {
			v.errf(p+".keys", "needs at least one key")
		}
		for k, key := range t.Keys {
			kp := p + ".keys[" + strconv.Itoa(k) + "]"
			h, err := keyHash(key)
			if err != nil {
				v.errf(kp, "%s", err)
				continue
			}
			if prev, dup := keys[h]; dup {
				v.errf(kp, "same key as %s", prev)
				continue
			}
			keys[h] = kp
		}
		v.limit(p+".rpm", t.RPM)
		v.limit(p+".tpm", t.TPM)
		v.limit(p+".concurrency", t.Concurrency)
		v.nonNegative(p+".interactive_wait", t.InteractiveWait)
		v.nonNegative(p+".batch_wait", t.BatchWait)
		switch t.Priority {
		case PriorityInteractive, PriorityBatch:
		default:
			v.errf(p+".priority", "must be %q or %q (got %q)", PriorityInteractive, PriorityBatch, t.Priority)
		}
		v.mode(p+".mode", t.Mode)
		if _, ok := v.c.Team(t.Team); t.Team != "" && !ok {
			v.errf(p+".team", "no [[teams]] entry is named %q", t.Team)
		}
		seen := map[string]int{}
		for k, ml := range t.ModelLimits {
			lp := fmt.Sprintf("%s.model_limits[%d]", p, k)
			if first, dup := seen[ml.Model]; dup {
				v.errf(lp+".model", "duplicate model %q (also %s.model_limits[%d])", ml.Model, p, first)
			} else if ml.Model == "" {
				v.errf(lp+".model", "must not be empty")
			} else if len(ml.Model) > MaxModelBytes {
				v.errf(lp+".model", "must be at most %d bytes (got %d)", MaxModelBytes, len(ml.Model))
			} else {
				seen[ml.Model] = k
			}
			v.limit(lp+".rpm", ml.RPM)
			v.limit(lp+".tpm", ml.TPM)
			v.limit(lp+".concurrency", ml.Concurrency)
		}
	}
}

func (v *validator) teams() {
	names := map[string]int{}
	for i, t := range v.c.Teams {
		p := fmt.Sprintf("teams[%d]", i)
		v.uniqueName(p+".name", "team", "teams", t.Name, i, names)
		v.limit(p+".rpm", t.RPM)
		v.limit(p+".tpm", t.TPM)
		v.limit(p+".concurrency", t.Concurrency)
		v.mode(p+".mode", t.Mode)
	}
}

// uniqueName checks the name of entry i of a table array (kind: its
// singular, plural: the array's key), which names records as seen.
func (v *validator) uniqueName(path, kind, plural, name string, i int, names map[string]int) {
	if !v.name(path, name) {
		return
	}
	if j, dup := names[name]; dup {
		v.errf(path, "duplicate %s name %q (also %s[%d])", kind, name, plural, j)
		return
	}
	names[name] = i
}

// mode checks a limit's mode.
func (v *validator) mode(path, m string) {
	switch m {
	case "", ModeEnforce, ModeShadow: // "": a config built in code, enforced
	default:
		v.errf(path, "must be %q or %q (got %q)", ModeEnforce, ModeShadow, m)
	}
}
