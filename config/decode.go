package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// decode turns a TOML document into a Config with defaults applied, checking
// the document's shape (known keys, value types, env: references, duration
// syntax). Semantic checks are left to Validate.
//
// go-toml decodes into a generic map (it owns TOML syntax: duplicate keys,
// table redefinition, ...); a second pass with its unstable parser records the
// line of every key path; the map is then walked against the schema below,
// which gives messages in ringgate's words rather than reflection's.
func decode(data []byte, name string, getenv func(string) string) (*Config, error) {
	var raw map[string]any
	if err := toml.Unmarshal(data, &raw); err != nil {
		return nil, syntaxError(name, err)
	}
	c := Default()
	c.Node.Name = "" // filled from the host name after overrides
	c.Path = name
	c.lines = &lazyLines{data: data}
	d := &decoder{c: c, getenv: getenv}
	d.table("", raw, d.rootFields())
	if err := firstError(d.errs); err != nil {
		return nil, err
	}
	return c, nil
}

func syntaxError(name string, err error) error {
	e := &Error{File: name, Msg: err.Error()}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		e.Line, _ = de.Position()
		e.Msg = strings.TrimPrefix(de.Error(), "toml: ")
	}
	e.Msg = "invalid TOML: " + e.Msg
	return e
}

type decoder struct {
	c      *Config
	getenv func(string) string
	errs   []*Error
	// tables, when set, records every table's known keys by its path
	// without array indices: how Keys reads the schema.
	tables map[string][]string
}

func (d *decoder) errf(path, format string, args ...any) {
	d.errs = append(d.errs, d.c.errAt(path, format, args...))
}

// field decodes the value v found at key path.
type field func(d *decoder, path string, v any)

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// table decodes a TOML table against fields; keys not in fields are errors.
func (d *decoder) table(path string, v any, fields map[string]field) {
	m, ok := v.(map[string]any)
	if !ok {
		d.errf(path, "must be a table (got %s)", typeName(v))
		return
	}
	if d.tables != nil {
		d.record(path, fields)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p := join(path, k)
		f, ok := fields[k]
		if !ok {
			if s := suggest(k, fields); s != "" {
				d.errf(p, "unknown key (did you mean %q?)", s)
			} else {
				d.errf(p, "unknown key")
			}
			continue
		}
		f(d, p, m[k])
	}
}

// suggest returns the known key closest to k, if it is close enough to be a
// plausible typo.
func suggest(k string, fields map[string]field) string {
	best, bestD := "", 3
	for f := range fields {
		if dd := editDistance(strings.ToLower(k), f); dd < bestD || dd == bestD && f < best {
			best, bestD = f, dd
		}
	}
	if bestD > 2 {
		return ""
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func typeName(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case int64:
		return "integer"
	case float64:
		return "float"
	case bool:
		return "boolean"
	case []any:
		return "array"
	case map[string]any:
		return "table"
	case nil:
		return "nothing"
	default:
		return "date/time"
	}
}

// str resolves a string value, substituting env: references. emptyEnvOK
// allows an env reference to an unset or empty variable (secrets).
func (d *decoder) str(path string, v any, emptyEnvOK bool) (string, bool) {
	s, ok := v.(string)
	if !ok {
		d.errf(path, "must be a string (got %s)", typeName(v))
		return "", false
	}
	name, ok := strings.CutPrefix(s, "env:")
	if !ok {
		return s, true
	}
	if !validEnvName(name) {
		d.errf(path, "bad environment variable name %q after \"env:\"", name)
		return "", false
	}
	val := d.getenv(name)
	if val == "" && !emptyEnvOK {
		d.errf(path, "environment variable %s is not set", name)
		return "", false
	}
	if val == "" {
		if d.c.unsetEnv == nil {
			d.c.unsetEnv = map[string]string{}
		}
		d.c.unsetEnv[path] = name
	}
	return val, true
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
		case '0' <= r && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

func fStr(dst *string) field {
	return func(d *decoder, path string, v any) {
		if s, ok := d.str(path, v, false); ok {
			*dst = s
		}
	}
}

// fWritten is f that also records that its key was written (Config.written).
func fWritten(f field) field {
	return func(d *decoder, path string, v any) {
		if d.c.written == nil {
			d.c.written = map[string]bool{}
		}
		d.c.written[path] = true
		f(d, path, v)
	}
}

// fSecret is fStr for secrets: an empty env variable means empty.
func fSecret(dst *string) field {
	return func(d *decoder, path string, v any) {
		if s, ok := d.str(path, v, true); ok {
			*dst = s
		}
	}
}

func fBool(dst *bool) field {
	return func(d *decoder, path string, v any) {
		b, ok := v.(bool)
		if !ok {
			d.errf(path, "must be true or false (got %s)", typeName(v))
			return
		}
		*dst = b
	}
}

func fStrs(dst *[]string) field {
	return func(d *decoder, path string, v any) {
		a, ok := v.([]any)
		if !ok {
			d.errf(path, "must be an array of strings (got %s)", typeName(v))
			return
		}
		out := make([]string, 0, len(a))
		for i, e := range a {
			if s, ok := d.str(fmt.Sprintf("%s[%d]", path, i), e, false); ok {
				out = append(out, s)
			}
		}
		*dst = out
	}
}

func fDur(dst *time.Duration) field {
	return func(d *decoder, path string, v any) {
		if _, isStr := v.(string); !isStr {
			d.errf(path, "must be a duration string like \"15s\" (got %s)", typeName(v))
			return
		}
		s, ok := d.str(path, v, false)
		if !ok {
			return
		}
		dur, err := time.ParseDuration(s)
		if err != nil {
			d.errf(path, "bad duration %q (use a number and unit, e.g. \"15s\", \"100ms\")", s)
			return
		}
		*dst = dur
	}
}

func (d *decoder) integer(path string, v any) (int64, bool) {
	n, ok := v.(int64)
	if !ok {
		d.errf(path, "must be an integer (got %s)", typeName(v))
	}
	return n, ok
}

func fInt(dst *int) field {
	return func(d *decoder, path string, v any) {
		if n, ok := d.integer(path, v); ok {
			if n > math.MaxInt || n < math.MinInt {
				d.errf(path, "too large (got %d)", n)
				return
			}
			*dst = int(n)
		}
	}
}

func fInt64(dst *int64) field {
	return func(d *decoder, path string, v any) {
		if n, ok := d.integer(path, v); ok {
			*dst = n
		}
	}
}

// fBase64 decodes a secret written in base64 (standard or URL alphabet,
// padding optional). An empty env variable means empty.
func fBase64(dst *[]byte) field {
	return func(d *decoder, path string, v any) {
		s, ok := d.str(path, v, true)
		if !ok {
			return
		}
		s = strings.TrimSpace(s)
		if s == "" {
			*dst = nil
			return
		}
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			if b, err := enc.DecodeString(s); err == nil {
				*dst = b
				return
			}
		}
		d.errf(path, "must be base64 of 32 bytes (not valid base64; try: openssl rand -base64 32)")
	}
}

func fTable(fields map[string]field) field {
	return func(d *decoder, path string, v any) { d.table(path, v, fields) }
}

// fTables decodes an array of tables, calling each(i, path, table) per element.
func fTables(each func(d *decoder, path string, v any)) field {
	return func(d *decoder, path string, v any) {
		a, ok := v.([]any)
		if !ok {
			if m, ok := v.([]map[string]any); ok {
				a = make([]any, len(m))
				for i := range m {
					a[i] = m[i]
				}
			} else {
				d.errf(path, "must be an array of tables, written [[%s]] (got %s)", tableName(path), typeName(v))
				return
			}
		}
		for i, e := range a {
			each(d, path+"["+strconv.Itoa(i)+"]", e)
		}
	}
}

// fModelLimits decodes [[upstreams.model_limits]] or [[tenants.model_limits]] (or an inline array of
// tables) into dst.
func fModelLimits(dst *[]ModelLimit) field {
	return fTables(func(d *decoder, path string, v any) {
		var ml ModelLimit
		d.table(path, v, map[string]field{
			"model":       fStr(&ml.Model),
			"rpm":         fInt(&ml.RPM),
			"tpm":         fInt(&ml.TPM),
			"concurrency": fInt(&ml.Concurrency),
		})
		*dst = append(*dst, ml)
	})
}

// tableName is path as a TOML header names it: "upstreams[0].model_limits"
// is written [[upstreams.model_limits]].
func tableName(path string) string {
	var b strings.Builder
	skip := false
	for _, r := range path {
		switch {
		case r == '[':
			skip = true
		case r == ']':
			skip = false
		case !skip:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func (d *decoder) rootFields() map[string]field {
	c := d.c
	return map[string]field{
		"node": fTable(map[string]field{
			"name":           fStr(&c.Node.Name),
			"listen":         fStr(&c.Node.Listen),
			"gossip":         fStr(&c.Node.Gossip),
			"advertise":      fStr(&c.Node.Advertise),
			"join":           fStrs(&c.Node.Join),
			"drain_timeout":  fDur(&c.Node.DrainTimeout),
			"header_timeout": fDur(&c.Node.HeaderTimeout),
			"body_min_rate":  fInt64(&c.Node.BodyMinRate),
			"body_grace":     fDur(&c.Node.BodyGrace),
			"access_log":     fBool(&c.Node.AccessLog),
		}),
		"cluster": fTable(map[string]field{
			"secret":                  fBase64(&c.Cluster.Secret),
			"forward_connect_timeout": fDur(&c.Cluster.ForwardConnectTimeout),
			"forward_timeout":         fDur(&c.Cluster.ForwardTimeout),
			"hop_skew":                fDur(&c.Cluster.HopSkew),
			"handoff_timeout":         fDur(&c.Cluster.HandoffFetchTimeout),
		}),
		"admin": fTable(map[string]field{
			"token": fSecret(&c.Admin.Token),
		}),
		"redis": fTable(map[string]field{
			"addr":              fStr(&c.Redis.Addr),
			"snapshot_interval": fDur(&c.Redis.SnapshotInterval),
			"timeout":           fDur(&c.Redis.Timeout),
			"handoff_wait":      fDur(&c.Redis.HandoffWait),
			"addrs":             fStrs(&c.Redis.Addrs),
			"master_name":       fStr(&c.Redis.MasterName),
			"username":          fSecret(&c.Redis.Username),
			"password":          fSecret(&c.Redis.Password),
			"tls":               fBool(&c.Redis.TLS),
			"tls_ca_file":       fStr(&c.Redis.TLSCAFile),
			"tls_server_name":   fStr(&c.Redis.TLSServerName),
		}),
		"queue": fTable(map[string]field{
			"interactive_wait": fDur(&c.Queue.InteractiveWait),
			"batch_wait":       fDur(&c.Queue.BatchWait),
			"max_depth":        fInt(&c.Queue.MaxDepth),
		}),
		"limits": fTable(map[string]field{
			"window":             fDur(&c.Limits.Window),
			"slot_ttl":           fDur(&c.Limits.SlotTTL),
			"max_body_bytes":     fInt64(&c.Limits.MaxBodyBytes),
			"default_completion": fInt(&c.Limits.DefaultCompletion),
			"spillover_rps":      fInt(&c.Limits.SpilloverRPS),
			"unknown_models":     fWritten(fStr(&c.Limits.UnknownModels)),
		}),
		"upstreams": fTables(func(d *decoder, path string, v any) {
			u := defaultUpstream()
			d.table(path, v, map[string]field{
				"name":                fStr(&u.Name),
				"kind":                fStr(&u.Kind),
				"base_url":            fStr(&u.BaseURL),
				"api_key":             fSecret(&u.APIKey),
				"models":              fStrs(&u.Models),
				"rpm":                 fInt(&u.RPM),
				"tpm":                 fInt(&u.TPM),
				"concurrency":         fInt(&u.Concurrency),
				"connect_timeout":     fDur(&u.ConnectTimeout),
				"timeout":             fDur(&u.Timeout),
				"stream_idle_timeout": fDur(&u.StreamIdleTimeout),
				"anthropic_version":   fStr(&u.AnthropicVersion),
				"model_limits":        fModelLimits(&u.ModelLimits),
				"on_redis_down":       fWritten(fStr(&u.OnRedisDown)),
				"mode":                fStr(&u.Mode),
			})
			u.BaseURL = strings.TrimRight(u.BaseURL, "/")
			c.Upstreams = append(c.Upstreams, u)
		}),
		"tenants": func() field {
			// One schema for every [[tenants]] table, decoding into t,
			// which each table starts afresh and is then copied out: a
			// config of 100 000 tenants builds it once, not 100 000 times.
			var t Tenant
			fields := map[string]field{
				"name":             fStr(&t.Name),
				"keys":             fStrs(&t.Keys),
				"rpm":              fInt(&t.RPM),
				"tpm":              fInt(&t.TPM),
				"concurrency":      fInt(&t.Concurrency),
				"priority":         fStr(&t.Priority),
				"mode":             fStr(&t.Mode),
				"interactive_wait": fDur(&t.InteractiveWait),
				"batch_wait":       fDur(&t.BatchWait),
				"team":             fStr(&t.Team),
				"model_limits":     fModelLimits(&t.ModelLimits),
			}
			return fTables(func(d *decoder, path string, v any) {
				t = defaultTenant()
				d.table(path, v, fields)
				c.Tenants = append(c.Tenants, t)
			})
		}(),
		"teams": fTables(func(d *decoder, path string, v any) {
			t := defaultTeam()
			d.table(path, v, map[string]field{
				"name":        fStr(&t.Name),
				"rpm":         fInt(&t.RPM),
				"tpm":         fInt(&t.TPM),
				"concurrency": fInt(&t.Concurrency),
				"mode":        fStr(&t.Mode),
			})
			c.Teams = append(c.Teams, t)
		}),
	}
}

// keyLines maps every key path in a (syntactically valid) document to the
// line it is written on: "node.listen", "tenants[1].rpm", "node.join[0]",
// and tables such as "tenants[1]" to their header line. With want, only
// the paths in it, and the keys of the tables not in it are not read (the
// few keys of a warning, in a file of 100 000 tenants).
func keyLines(data []byte, want map[string]bool) map[string]int {
	x := &lineIndex{want: want, lines: map[string]int{}, arrays: map[string]int{}}
	for i, b := range data {
		if b == '\n' {
			x.nl = append(x.nl, i)
		}
	}
	var p unstable.Parser
	p.Reset(data)
	cur := ""
	skip := false // with want: cur's keys are not wanted
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table:
			parts, l := x.keyParts(e)
			cur = x.resolve(parts, l)
			skip = want != nil && !want[cur]
		case unstable.ArrayTable:
			cur, skip = x.arrayTable(e)
		case unstable.KeyValue:
			if !skip {
				x.keyValue(cur, e)
			}
		}
	}
	return x.lines
}

// lineIndex is keyLines' walk of a document: the offsets of its line
// ends (nl), the paths wanted (nil: all), the lines found, and how many
// elements each array table has so far.
type lineIndex struct {
	nl     []int
	want   map[string]bool
	lines  map[string]int
	arrays map[string]int // array-table path -> number of elements so far
}

func (x *lineIndex) lineOf(n *unstable.Node) int {
	if n == nil {
		return 0
	}
	if n.Raw.Length == 0 {
		if n.Kind == unstable.Array { // no range of its own: use its first element's
			return x.lineOf(n.Child())
		}
		return 0
	}
	return sort.SearchInts(x.nl, int(n.Raw.Offset)) + 1
}

func (x *lineIndex) set(path string, line int) {
	if x.want != nil && !x.want[path] {
		return
	}
	if _, ok := x.lines[path]; !ok && line > 0 {
		x.lines[path] = line
	}
}

func (x *lineIndex) keyParts(n *unstable.Node) ([]string, int) {
	var parts []string
	line := 0
	it := n.Key()
	for it.Next() {
		k := it.Node()
		if line == 0 {
			line = x.lineOf(k)
		}
		parts = append(parts, string(k.Data))
	}
	return parts, line
}

// resolve is the path of a table header's key parts, each array table on
// the way at its last element.
func (x *lineIndex) resolve(parts []string, line int) string {
	p := ""
	for _, part := range parts {
		p = join(p, part)
		if n := x.arrays[p]; n > 0 {
			p = fmt.Sprintf("%s[%d]", p, n-1)
		}
		x.set(p, line)
	}
	return p
}

// arrayTable opens a new element of an array table: its path, and whether
// its keys are skipped (not wanted).
func (x *lineIndex) arrayTable(e *unstable.Node) (cur string, skip bool) {
	parts, l := x.keyParts(e)
	base := x.resolve(parts[:len(parts)-1], l)
	base = join(base, parts[len(parts)-1])
	x.set(base, l)
	n := x.arrays[base]
	x.arrays[base] = n + 1
	if x.want != nil && !x.want[base] {
		return "", true
	}
	cur = fmt.Sprintf("%s[%d]", base, n)
	x.set(cur, l)
	return cur, false
}

// keyValue records a key of table cur, and what its value holds.
func (x *lineIndex) keyValue(cur string, e *unstable.Node) {
	parts, l := x.keyParts(e)
	path := cur
	for _, part := range parts {
		path = join(path, part)
		x.set(path, l)
	}
	if x.want == nil || x.want[path] {
		x.value(path, e.Value(), l)
	}
}

func (x *lineIndex) value(path string, n *unstable.Node, line int) {
	switch n.Kind {
	case unstable.Array:
		i := 0
		for it := n.Children(); it.Next(); {
			e := it.Node()
			if e.Kind == unstable.Comment {
				continue
			}
			p := fmt.Sprintf("%s[%d]", path, i)
			l := x.lineOf(e)
			if l == 0 {
				l = line
			}
			x.set(p, l)
			x.value(p, e, l)
			i++
		}
	case unstable.InlineTable:
		for it := n.Children(); it.Next(); {
			kv := it.Node()
			if kv.Kind != unstable.KeyValue {
				continue
			}
			parts, l := x.keyParts(kv)
			p := path
			for _, part := range parts {
				p = join(p, part)
				x.set(p, l)
			}
			x.value(p, kv.Value(), l)
		}
	}
}
