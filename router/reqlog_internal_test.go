package router

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/reserve"
	"github.com/ringgate/ringgate/ring"
)

// toldRouter is a standalone router "t" on a fake clock that stands
// still, logging JSON to the buffer it returns, in front of the upstream
// at upAddr (model gpt-4o-mini), its tenants and limits set by tune;
// requests do not wait in lines. It returns the router and its address.
func toldRouter(t *testing.T, upAddr string, tune func(*config.Config)) (*Router, string, *syncBuffer) {
	t.Helper()
	cfg := config.Default()
	cfg.Node.Name, cfg.Node.Gossip = "t", ""
	cfg.Queue.InteractiveWait, cfg.Queue.BatchWait = 0, 0
	cfg.Upstreams = []config.Upstream{{
		Name: "openai", Kind: config.KindOpenAI, BaseURL: "http://" + upAddr, Models: []string{"gpt-4o-mini"},
		Timeout: 10 * time.Second, ConnectTimeout: time.Second, StreamIdleTimeout: 10 * time.Second,
		AnthropicVersion: config.DefaultAnthropicVersion,
	}}
	tune(cfg)
	logs := &syncBuffer{}
	r, err := New(Options{Config: cfg, Tokenizer: testTokenizer(t), Clock: clockwork.NewFakeClockAt(someDay),
		Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, serveRouter(t, r), logs
}

func testTokenizer(t *testing.T) *reserve.Tokenizer {
	t.Helper()
	tok, err := reserve.NewTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// toldTenant is a tenant with key "sk-<name>" and the limits given.
func toldTenant(name string, rpm int) config.Tenant {
	return config.Tenant{Name: name, Keys: []string{"sk-" + name}, RPM: rpm, TPM: 1 << 30, Concurrency: 100,
		Priority: config.PriorityInteractive}
}

// answer is what a client got: status, x-request-id, error code.
type answer struct {
	status   int
	id, code string
	node     string
}

// chat posts a chat completion to addr for tenant's key, with
// x-request-id id when id is not empty.
func chat(t *testing.T, addr, tenant, id string, stream bool) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body := fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":5,"stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk-"+tenant)
	if id != "" {
		req.Header.Set("X-Request-Id", id)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return answer{status: resp.StatusCode, id: resp.Header.Get("X-Request-Id"), code: e.Error.Code, node: resp.Header.Get("X-Ringgate-Node")}
}

// logged is the JSON lines of buf whose msg is msg.
func logged(t *testing.T, buf *syncBuffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if l == "" || json.Unmarshal([]byte(l), &m) != nil || m["msg"] != msg {
			continue
		}
		out = append(out, m)
	}
	return out
}

// hasFields reports the fields of line that differ from want.
func hasFields(line map[string]any, want map[string]any) []string {
	var diff []string
	for k, v := range want {
		if line[k] != v {
			diff = append(diff, fmt.Sprintf("%s = %v, want %v", k, line[k], v))
		}
	}
	return diff
}

// A tenant's own limit refuses: one refused line names the tenant, the
// limit, what it used, the retry and the answer, with the client's
// request id, which the answer echoes.
func TestRefusedLineTenant(t *testing.T) {
	_, up := startFake(t, fakeupstream.Options{CompletionMin: 5, CompletionMax: 5})
	_, addr, logs := toldRouter(t, up, func(c *config.Config) { c.Tenants = []config.Tenant{toldTenant("acme", 1)} })
	if a := chat(t, addr, "acme", "client-1", false); a.status != http.StatusOK || a.id != "client-1" {
		t.Fatalf("first request: %+v, want 200 with x-request-id client-1", a)
	}
	a := chat(t, addr, "acme", "client-2", false)
	if a.status != http.StatusTooManyRequests || a.id != "client-2" {
		t.Fatalf("second request: %+v, want 429 with x-request-id client-2", a)
	}
	lines := logged(t, logs, "refused")
	if len(lines) != 1 {
		t.Fatalf("%d refused lines, want 1: %s", len(lines), logs.String())
	}
	if d := hasFields(lines[0], map[string]any{"tenant": "acme", "limit_level": "tenant", "by": "acme", "dimension": "requests",
		"limit": 1.0, "used": 1.0, "request_id": "client-2", "status": 429.0, "code": "rate_limit_exceeded",
		"queued_ms": -1.0, "not_logged": 0.0}); d != nil {
		t.Errorf("refused line %v: %v", lines[0], d)
	}
	if ms, _ := lines[0]["retry_after_ms"].(float64); ms <= 0 || ms > 62_000 {
		t.Errorf("retry_after_ms %v, want within the 60 s window and a bucket", lines[0]["retry_after_ms"])
	}
	// The clock stands still: the next refusals of the tenant are
	// counted, not written, and an id the client did not send is made.
	for _, id := range []string{"", "has space", strings.Repeat("x", 129)} {
		if a := chat(t, addr, "acme", id, false); a.status != http.StatusTooManyRequests || !strings.HasPrefix(a.id, "rg-") {
			t.Errorf("client id %q: %+v, want 429 with a made id rg-...", id, a)
		}
	}
	if n := len(logged(t, logs, "refused")); n != 1 {
		t.Errorf("%d refused lines within the tenant's second, want 1", n)
	}
}

// A team's limit and a tenant's limit on a model refuse: the line names
// the level and the entity as /teams and /tenants do.
func TestRefusedLineLevels(t *testing.T) {
	_, up := startFake(t, fakeupstream.Options{CompletionMin: 5, CompletionMax: 5})
	_, addr, logs := toldRouter(t, up, func(c *config.Config) {
		c.Teams = []config.Team{{Name: "research", RPM: 1}}
		member, limited := toldTenant("member", 100), toldTenant("limited", 100)
		member.Team = "research"
		limited.ModelLimits = []config.ModelLimit{{Model: "gpt-4o-mini", RPM: 1}}
		c.Tenants = []config.Tenant{member, limited}
	})
	for _, tn := range []string{"member", "limited"} {
		if a := chat(t, addr, tn, "", false); a.status != http.StatusOK {
			t.Fatalf("%s's first request: %+v, want 200", tn, a)
		}
		if a := chat(t, addr, tn, tn+"-2", false); a.status != http.StatusTooManyRequests {
			t.Fatalf("%s's second request: %+v, want 429", tn, a)
		}
	}
	lines := logged(t, logs, "refused")
	if len(lines) != 2 {
		t.Fatalf("%d refused lines, want 2: %s", len(lines), logs.String())
	}
	want := []map[string]any{
		{"tenant": "member", "limit_level": "team", "by": "team/research", "limit": 1.0, "used": 1.0, "request_id": "member-2"},
		{"tenant": "limited", "limit_level": "model", "by": "limited/model/gpt-4o-mini", "limit": 1.0, "used": 1.0, "request_id": "limited-2"},
	}
	for i, w := range want {
		if d := hasFields(lines[i], w); d != nil {
			t.Errorf("refused line %v: %v", lines[i], d)
		}
	}
}

// The provider's budget refuses: the line names the upstream's budget,
// its limit and the use the node knows.
func TestRefusedLineUpstream(t *testing.T) {
	_, up := startFake(t, fakeupstream.Options{CompletionMin: 5, CompletionMax: 5})
	_, addr, logs := toldRouter(t, up, func(c *config.Config) {
		c.Upstreams[0].RPM = 1
		c.Tenants = []config.Tenant{toldTenant("acme", 100)}
	})
	if a := chat(t, addr, "acme", "", false); a.status != http.StatusOK {
		t.Fatalf("first request: %+v, want 200", a)
	}
	if a := chat(t, addr, "acme", "up-2", false); a.status != http.StatusTooManyRequests || a.id != "up-2" {
		t.Fatalf("second request: %+v, want 429 with x-request-id up-2", a)
	}
	lines := logged(t, logs, "refused")
	if len(lines) != 1 {
		t.Fatalf("%d refused lines, want 1: %s", len(lines), logs.String())
	}
	if d := hasFields(lines[0], map[string]any{"tenant": "acme", "limit_level": "upstream", "by": "upstream/openai",
		"dimension": "requests", "limit": 1.0, "request_id": "up-2", "status": 429.0, "code": "rate_limit_exceeded"}); d != nil {
		t.Errorf("refused line %v: %v", lines[0], d)
	}
}

// The request id reaches the provider: the client's, or the one the node
// made, which its answer carries.
func TestRequestIDReachesProvider(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		seen = append(seen, req.Header.Get("X-Request-Id"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
	}))
	t.Cleanup(up.Close)
	_, addr, _ := toldRouter(t, strings.TrimPrefix(up.URL, "http://"), func(c *config.Config) {
		c.Tenants = []config.Tenant{toldTenant("acme", 100)}
	})
	a1, a2 := chat(t, addr, "acme", "client-1", false), chat(t, addr, "acme", "", false)
	mu.Lock()
	defer mu.Unlock()
	if a1.status != http.StatusOK || a2.status != http.StatusOK || len(seen) != 2 {
		t.Fatalf("answers %+v %+v, provider saw %d", a1, a2, len(seen))
	}
	if seen[0] != "client-1" || seen[1] != a2.id || !strings.HasPrefix(a2.id, "rg-") {
		t.Errorf("provider saw ids %q, want client-1 and the made id %q", seen, a2.id)
	}
}

// An edge hands requests to their tenant's owner: the id the edge made,
// or the client's, reaches the owner, which names the answer with it. The
// owner logs its refusal under that id; the edge logs none.
func TestRefusedOnTheOwnerAfterAHop(t *testing.T) {
	tok := testTokenizer(t)
	_, upAddr := startFake(t, fakeupstream.Options{CountTokens: tok.Count, CompletionMin: 5, CompletionMax: 5})
	rg := ring.New(1, []string{"a", "b"})
	tenant := ""
	for i := 0; tenant == ""; i++ {
		if o, _ := rg.Owner(fmt.Sprintf("t%d", i)); o == "b" {
			tenant = fmt.Sprintf("t%d", i)
		}
	}
	mk := func(name string) (*Router, string, *syncBuffer) {
		cfg := config.Default()
		cfg.Node.Name, cfg.Node.Gossip = name, "127.0.0.1:0"
		cfg.Cluster.Secret = bytes.Repeat([]byte{7}, 32)
		cfg.Queue.InteractiveWait, cfg.Queue.BatchWait = 0, 0
		cfg.Upstreams = []config.Upstream{{
			Name: "openai", Kind: config.KindOpenAI, BaseURL: "http://" + upAddr, Models: []string{"gpt-4o-mini"},
			Timeout: 10 * time.Second, ConnectTimeout: time.Second, StreamIdleTimeout: 10 * time.Second,
			AnthropicVersion: config.DefaultAnthropicVersion,
		}}
		cfg.Tenants = []config.Tenant{toldTenant(tenant, 1)}
		cfg.Node.AccessLog = true
		logs := &syncBuffer{}
		r, err := New(Options{Config: cfg, Tokenizer: tok, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		return r, serveRouter(t, r), logs
	}
	a, addrA, logsA := mk("a")
	b, addrB, logsB := mk("b")
	v := View{Ring: rg, Members: []Member{{Name: "a", Addr: addrA, State: "active"}, {Name: "b", Addr: addrB, State: "active"}}}
	a.SetView(v)
	b.SetView(v)
	first := chat(t, addrA, tenant, "", false)
	if first.status != http.StatusOK || first.node != "b" || !strings.HasPrefix(first.id, "rg-") {
		t.Fatalf("first request via the edge: %+v, want 200 from b with a made id", first)
	}
	r := chat(t, addrA, tenant, "client-2", false)
	if r.status != http.StatusTooManyRequests || r.node != "b" || r.id != "client-2" {
		t.Fatalf("second request via the edge: %+v, want 429 from b with the client's id", r)
	}
	onB := logged(t, logsB, "refused")
	if len(onB) != 1 || onB[0]["request_id"] != "client-2" || onB[0]["tenant"] != tenant {
		t.Errorf("owner's refused lines %v, want one with request_id client-2", onB)
	}
	if onA := logged(t, logsA, "refused"); len(onA) != 0 {
		t.Errorf("the edge logged %v, want no refused line: the owner decided", onA)
	}
	// Both nodes write each request's access line, under its one id.
	for name, logs := range map[string]*syncBuffer{"a": logsA, "b": logsB} {
		acc := logged(t, logs, "access")
		if len(acc) != 2 || hasFields(acc[0], map[string]any{"request_id": first.id, "status": 200.0, "owner": "b", "hop": true, "tenant": tenant}) != nil ||
			hasFields(acc[1], map[string]any{"request_id": "client-2", "status": 429.0, "owner": "b", "hop": true, "code": "rate_limit_exceeded", "tenant": tenant}) != nil {
			t.Errorf("%s's access lines %v, want the two requests' under their ids", name, acc)
		}
	}
	// The edge made the first id, not the owner: each node's ids have a
	// prefix of their own.
	direct := chat(t, addrB, tenant, "", false)
	if prefix := func(id string) string { return id[:strings.LastIndexByte(id, '-')] }; prefix(direct.id) == prefix(first.id) {
		t.Errorf("the id of the request via the edge, %q, was made by the owner (its own: %q)", first.id, direct.id)
	}
}

// With access_log on, every request writes an access line when its
// answer is done, a stream's when it ends; a reload turns it off.
func TestAccessLog(t *testing.T) {
	_, up := startFake(t, fakeupstream.Options{CompletionMin: 5, CompletionMax: 5})
	var cfg *config.Config
	r, addr, logs := toldRouter(t, up, func(c *config.Config) {
		c.Node.AccessLog = true
		c.Tenants = []config.Tenant{toldTenant("acme", 3)}
		cfg = c
	})
	if a := chat(t, addr, "acme", "json-1", false); a.status != http.StatusOK {
		t.Fatalf("JSON request: %+v", a)
	}
	if a := chat(t, addr, "acme", "stream-1", true); a.status != http.StatusOK {
		t.Fatalf("stream request: %+v", a)
	}
	if a := chat(t, addr, "nobody", "bad-key", false); a.status != http.StatusUnauthorized || a.id != "bad-key" {
		t.Fatalf("unknown key: %+v, want 401 with its id", a)
	}
	var acc []map[string]any
	if !poll(5*time.Second, func() bool { acc = logged(t, logs, "access"); return len(acc) == 3 }) {
		t.Fatalf("%d access lines, want 3: %s", len(acc), logs.String())
	}
	byID := map[string]map[string]any{}
	for _, l := range acc {
		byID[l["request_id"].(string)] = l
	}
	for _, id := range []string{"json-1", "stream-1"} {
		l := byID[id]
		if d := hasFields(l, map[string]any{"tenant": "acme", "model": "gpt-4o-mini", "status": 200.0, "code": "",
			"owner": "t", "hop": false, "queued_ms": -1.0}); d != nil {
			t.Errorf("%s: %v", id, d)
		}
		if est, _ := l["tokens_estimated"].(float64); est <= 0 {
			t.Errorf("%s: tokens_estimated %v, want > 0", id, l["tokens_estimated"])
		}
		if ch, _ := l["tokens_charged"].(float64); ch <= 0 {
			t.Errorf("%s: tokens_charged %v, want > 0", id, l["tokens_charged"])
		}
	}
	if d := hasFields(byID["bad-key"], map[string]any{"status": 401.0, "code": "invalid_api_key", "tenant": ""}); d != nil {
		t.Errorf("bad-key: %v", d)
	}
	cfg.Node.AccessLog = false
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if a := chat(t, addr, "acme", "off-1", false); a.status != http.StatusOK || a.id != "off-1" {
		t.Fatalf("request with the access log off: %+v", a)
	}
	if n := len(logged(t, logs, "access")); n != 3 {
		t.Errorf("%d access lines after access_log = false, want still 3", n)
	}
}

// A request that waited in its tenant's line until its wait budget was
// spent is refused with a line that says how long it waited, on the
// node's clock.
func TestRefusedLineAfterAWait(t *testing.T) {
	clk := clockwork.NewFakeClockAt(someDay)
	logs := &syncBuffer{}
	r, cfg := testRouter(t, Options{Clock: clk, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	cfg.Queue.InteractiveWait = 5 * time.Minute
	cfg.Tenants = []config.Tenant{{Name: "acme", Keys: []string{"k"}, Concurrency: 1, Priority: config.PriorityInteractive}}
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	r.SetView(View{Ring: ring.New(1, []string{"t"}), Members: []Member{{Name: "t", Addr: "127.0.0.1:1", State: "active"}}})
	tn := r.state.Load().ByName["acme"]
	if _, d := tn.Core().Lim.Admit(r.clock(), 1); !d.Allowed { // a call in flight holds the one slot
		t.Fatalf("the first call was refused: %+v", d)
	}
	status := sendWhenQueued(t, r, tn)
	clk.Advance(5 * time.Minute)
	if s := <-status; s != http.StatusTooManyRequests {
		t.Fatalf("status %d once the wait budget was spent, want 429", s)
	}
	lines := logged(t, logs, "refused")
	if len(lines) != 1 {
		t.Fatalf("%d refused lines, want 1: %s", len(lines), logs.String())
	}
	if d := hasFields(lines[0], map[string]any{"tenant": "acme", "limit_level": "tenant", "dimension": "concurrency",
		"limit": 1.0, "used": 1.0, "queued_ms": 300_000.0, "status": 429.0}); d != nil {
		t.Errorf("refused line %v: %v", lines[0], d)
	}
}

// A request the node cannot read gets an id too: the client's, when its
// headers were read.
func TestRequestIDOnAnUnreadRequest(t *testing.T) {
	_, up := startFake(t, fakeupstream.Options{})
	_, addr, _ := toldRouter(t, up, func(c *config.Config) {
		c.Limits.MaxBodyBytes = 100
		c.Tenants = []config.Tenant{toldTenant("acme", 100)}
	})
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(strings.Repeat("x", 1000)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Request-Id", "big-1")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || resp.Header.Get("X-Request-Id") != "big-1" {
		t.Errorf("status %d, x-request-id %q: want 413 with big-1", resp.StatusCode, resp.Header.Get("X-Request-Id"))
	}
}
