package router_test

// Helpers for the end-to-end tests in e2e_test.go: a real fake upstream and a
// real ringgate node on loopback, a plain net/http client in front of them,
// and checks that read only what a client or an operator can see (answers,
// headers, GET /tenants/{name}) plus what the fake upstream recorded.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/internal/audit"
	"github.com/ringgate/ringgate/node"
	"github.com/ringgate/ringgate/reserve"
)

const (
	openAIModel    = "gpt-4o-mini"
	anthropicModel = "claude-3-5-haiku"
	openAIUpKey    = "sk-upstream-openai"
	anthropicUpKey = "sk-upstream-anthropic"

	// clientTimeout bounds every client call: a hang fails the test instead
	// of stalling it.
	clientTimeout = 10 * time.Second
	// settleWait bounds the polls that wait for something asynchronous (a
	// stream's settlement, a freed slot, an aborted upstream record).
	settleWait = 5 * time.Second
)

// envConfig describes one node + fake upstream pair.
type envConfig struct {
	window            time.Duration // default 60s: nothing leaves the window during a functional test
	tenants           []config.Tenant
	fake              fakeupstream.Options // CountTokens is set to the shared tokenizer
	maxBodyBytes      int64                // 0: the default
	defaultCompletion int                  // 0: 256
	adminToken        string
	upstreamTimeout   time.Duration // 0: 30s
	streamIdleTimeout time.Duration // 0: 30s
	// openAIBaseURL, if set, replaces the OpenAI upstream's base URL (the
	// fake's address otherwise).
	openAIBaseURL string
	// queue, if set, is the [queue] table; without it refusals answer at
	// once (the tests of the limits count them).
	queue *config.Queue
	// openAI, if set, changes the OpenAI upstream (its provider limits).
	openAI func(*config.Upstream)
	// teams are the [[teams]] the tenants may name.
	teams []config.Team
}

// env is a running fake upstream and a ringgate node in front of it.
type env struct {
	t      testing.TB
	cfg    *config.Config
	fake   *fakeupstream.Server
	node   *node.Node
	base   string // http://host:port of the node
	client *http.Client
}

// tenantCfg is a tenant with one key, "key-<name>".
func tenantCfg(name string, rpm, tpm, concurrency int) config.Tenant {
	return config.Tenant{
		Name: name, Keys: []string{keyOf(name)}, RPM: rpm, TPM: tpm, Concurrency: concurrency,
		Priority: config.PriorityInteractive,
	}
}

func keyOf(tenant string) string { return "key-" + tenant }

// newEnv starts a fake upstream and a node configured with ec; both are
// closed when the test ends.
func newEnv(t testing.TB, ec envConfig) *env {
	t.Helper()
	tok, err := reserve.NewTokenizer()
	if err != nil {
		t.Fatal(err)
	}

	fo := ec.fake
	fo.CountTokens = tok.Count
	fake := fakeupstream.New(fo)
	fakeAddr, err := fake.Start("127.0.0.1:0")
	if err != nil {
		t.Fatalf("start fake upstream: %v", err)
	}

	cfg := config.Default()
	cfg.Node.Name = "e2e-" + strings.ReplaceAll(t.Name(), "/", "-")
	cfg.Node.Listen = "127.0.0.1:0"
	cfg.Node.DrainTimeout = time.Second
	cfg.Limits.Window = 60 * time.Second
	if ec.window > 0 {
		cfg.Limits.Window = ec.window
	}
	if ec.maxBodyBytes > 0 {
		cfg.Limits.MaxBodyBytes = ec.maxBodyBytes
	}
	cfg.Limits.DefaultCompletion = 256
	if ec.defaultCompletion > 0 {
		cfg.Limits.DefaultCompletion = ec.defaultCompletion
	}
	cfg.Admin.Token = ec.adminToken
	cfg.Queue.InteractiveWait, cfg.Queue.BatchWait = 0, 0
	if ec.queue != nil {
		cfg.Queue = *ec.queue
	}
	openAIURL := "http://" + fakeAddr
	if ec.openAIBaseURL != "" {
		openAIURL = ec.openAIBaseURL
	}
	up := func(name, kind, url, key, model string) config.Upstream {
		u := config.Upstream{
			Name: name, Kind: kind, BaseURL: url, APIKey: key, Models: []string{model},
			ConnectTimeout:    2 * time.Second,
			Timeout:           30 * time.Second,
			StreamIdleTimeout: 30 * time.Second,
			AnthropicVersion:  config.DefaultAnthropicVersion,
		}
		if ec.upstreamTimeout > 0 {
			u.Timeout = ec.upstreamTimeout
		}
		if ec.streamIdleTimeout > 0 {
			u.StreamIdleTimeout = ec.streamIdleTimeout
		}
		return u
	}
	cfg.Upstreams = []config.Upstream{
		up("openai", config.KindOpenAI, openAIURL, openAIUpKey, openAIModel),
		up("anthropic", config.KindAnthropic, "http://"+fakeAddr, anthropicUpKey, anthropicModel),
	}
	if ec.openAI != nil {
		ec.openAI(&cfg.Upstreams[0])
	}
	cfg.Tenants = ec.tenants
	cfg.Teams = ec.teams
	cfg.Node.Gossip = "127.0.0.1:0"
	if err := cfg.Validate(); err != nil {
		_ = fake.Close()
		t.Fatalf("test config does not validate: %v", err)
	}
	// Standalone: no gossip, the node enforces every tenant itself. (The
	// validator wants a gossip address; node.Start reads "" as standalone.)
	cfg.Node.Gossip = ""

	var logger *slog.Logger
	if os.Getenv("RINGGATE_E2E_LOG") != "" {
		logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	} else {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	nd, err := node.Start(cfg, node.Options{Tokenizer: tok, Logger: logger})
	if err != nil {
		_ = fake.Close()
		t.Fatalf("start node: %v", err)
	}
	e := &env{
		t:    t,
		cfg:  cfg,
		fake: fake,
		node: nd,
		base: "http://" + nd.Addr(),
		client: &http.Client{
			Timeout:   clientTimeout,
			Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true},
		},
	}
	t.Cleanup(func() {
		e.client.CloseIdleConnections()
		// The fake first: it cuts whatever stream is still open, so the
		// node's shutdown finds nothing to wait for.
		if err := fake.Close(); err != nil {
			t.Errorf("close fake upstream: %v", err)
		}
		_ = nd.Close()
	})
	return e
}

// reply is a complete answer.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) String() string {
	return fmt.Sprintf("%d %s", r.status, truncate(string(r.body), 300))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// request builds a request to the node; key "" sends no key, and a key
// starting with "x-api-key:" is sent in that header instead of as a bearer.
// It is called from load goroutines too, so it never fails the test: the
// node's URL is well formed by construction.
func (e *env) request(ctx context.Context, method, path, key string, body []byte, hdr map[string]string) *http.Request {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.base+path, rd)
	if err != nil {
		panic(fmt.Sprintf("new request %s %s: %v", method, path, err))
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	switch {
	case key == "":
	case strings.HasPrefix(key, "x-api-key:"):
		req.Header.Set("x-api-key", strings.TrimPrefix(key, "x-api-key:"))
	default:
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return req
}

// do sends a request and reads the whole answer. Safe to call from any
// goroutine: failures are returned, not reported.
func (e *env) do(method, path, key string, body []byte, hdr map[string]string) (reply, error) {
	req := e.request(context.Background(), method, path, key, body, hdr)
	resp, err := e.client.Do(req)
	if err != nil {
		return reply{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// doChunked is do for a POST whose body is sent chunked (no
// Content-Length).
func (e *env) doChunked(path, key string, body []byte) (reply, error) {
	req := e.request(context.Background(), http.MethodPost, path, key, nil, nil)
	req.Header.Set("Content-Type", "application/json")
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = -1
	resp, err := e.client.Do(req)
	if err != nil {
		return reply{}, fmt.Errorf("POST %s (chunked): %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, fmt.Errorf("POST %s (chunked): reading the answer: %w", path, err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// sendStream is do for a streamed request: a 200 answer must be a complete
// SSE stream ending with [DONE].
func (e *env) sendStream(path, key string, body []byte) (reply, error) {
	r, err := e.do(http.MethodPost, path, key, body, nil)
	complete := bytes.HasSuffix(r.body, []byte("data: [DONE]\n\n"))
	if path == "/v1/responses" { // no [DONE]: response.completed ends it
		complete = bytes.Contains(r.body, []byte("event: response.completed\n"))
	}
	if err == nil && r.status == http.StatusOK && !complete {
		err = fmt.Errorf("POST %s: incomplete stream: %s", path, truncate(string(r.body), 300))
	}
	return r, err
}

// post sends a POST and fails the test on a transport error.
func (e *env) post(path, key string, body []byte, hdr map[string]string) reply {
	e.t.Helper()
	r, err := e.do(http.MethodPost, path, key, body, hdr)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// get sends a GET with an optional bearer token.
func (e *env) get(path, token string) reply {
	e.t.Helper()
	r, err := e.do(http.MethodGet, path, token, nil, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// openStream sends a POST and returns the response with its body unread.
func (e *env) openStream(path, key string, body []byte, hdr map[string]string) *http.Response {
	e.t.Helper()
	resp, err := e.client.Do(e.request(context.Background(), http.MethodPost, path, key, body, hdr))
	if err != nil {
		e.t.Fatalf("POST %s: %v", path, err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// tenantView is GET /tenants/{name}.
type tenantView struct {
	Name     string `json:"name"`
	Owner    string `json:"owner"`
	Node     string `json:"node"`
	Priority string `json:"priority"`
	Window   string `json:"window"`
	Requests dim    `json:"requests"`
	Tokens   dim    `json:"tokens"`
	InFlight dim    `json:"in_flight"`
	Queued   int64  `json:"queued"`
	Queue    struct {
		Interactive, Batch struct {
			Waiting  int   `json:"waiting"`
			OldestMs int64 `json:"oldest_ms"`
		}
	} `json:"queue"`
}

type dim struct {
	Used  int64 `json:"used"`
	Limit int64 `json:"limit"`
}

func (e *env) tenant(name string) (tenantView, error) {
	r, err := e.do(http.MethodGet, "/tenants/"+name, e.cfg.Admin.Token, nil, nil)
	if err != nil {
		return tenantView{}, err
	}
	if r.status != http.StatusOK {
		return tenantView{}, fmt.Errorf("GET /tenants/%s: %s", name, r)
	}
	var v tenantView
	if err := json.Unmarshal(r.body, &v); err != nil {
		return tenantView{}, fmt.Errorf("GET /tenants/%s: %v in %s", name, err, r.body)
	}
	return v, nil
}

// waitTenant polls GET /tenants/{name} until cond holds (at most
// settleWait) and returns the view that satisfied it.
func (e *env) waitTenant(name, what string, cond func(tenantView) bool) tenantView {
	e.t.Helper()
	var last tenantView
	var lastErr error
	ok := poll(settleWait, func() bool {
		last, lastErr = e.tenant(name)
		return lastErr == nil && cond(last)
	})
	if !ok {
		e.t.Fatalf("tenant %s: waited %s for %s; last view %+v (err %v)", name, settleWait, what, last, lastErr)
	}
	return last
}

// waitSettled waits until the tenant has nothing in flight and its window
// holds exactly tokens tokens.
func (e *env) waitSettled(name string, tokens int64) tenantView {
	e.t.Helper()
	return e.waitTenant(name, fmt.Sprintf("in_flight 0 and %d tokens used", tokens), func(v tenantView) bool {
		return v.InFlight.Used == 0 && v.Tokens.Used == tokens
	})
}

// waitRecords waits until the fake has n records, all finished.
func (e *env) waitRecords(n int) []fakeupstream.Record {
	e.t.Helper()
	var recs []fakeupstream.Record
	ok := poll(settleWait, func() bool {
		recs = e.fake.Records()
		if len(recs) != n {
			return false
		}
		for _, r := range recs {
			if r.Finished.IsZero() {
				return false
			}
		}
		return true
	})
	if !ok {
		e.t.Fatalf("fake upstream: waited %s for %d finished records, have %d: %+v", settleWait, n, len(recs), recs)
	}
	return recs
}

// poll calls cond every few milliseconds until it holds or d has passed.
func poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ---- request bodies ----

type msg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

var chatMessages = []msg{
	{Role: "system", Content: "You are a terse assistant."},
	{Role: "user", Content: "Explain in one paragraph why an LLM gateway enforces token rate limits per tenant."},
}

// chatBody is an OpenAI chat request. maxTokens 0 leaves max_tokens out;
// includeUsage adds stream_options.include_usage=true.
func chatBody(model string, maxTokens int, stream, includeUsage bool) []byte {
	m := map[string]any{"model": model, "messages": chatMessages, "temperature": 0.2, "user": "e2e-user"}
	if maxTokens > 0 {
		m["max_tokens"] = maxTokens
	}
	if stream {
		m["stream"] = true
	}
	if includeUsage {
		m["stream_options"] = map[string]any{"include_usage": true}
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// messagesBody is an Anthropic Messages request.
func messagesBody(model string, maxTokens int, stream bool) []byte {
	m := map[string]any{
		"model":      model,
		"max_tokens": maxTokens,
		"system":     "You are a terse assistant.",
		"messages":   []msg{{Role: "user", Content: "Name three reasons to put a gateway in front of an LLM provider."}},
		"metadata":   map[string]any{"user_id": "e2e-user"},
	}
	if stream {
		m["stream"] = true
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// completionsBody is a legacy /v1/completions request.
func completionsBody(model string, maxTokens int, stream bool) []byte {
	return streamed(map[string]any{"model": model, "prompt": "Write a haiku about token buckets.", "max_tokens": maxTokens}, stream)
}

// responsesBody is a /v1/responses request (maxTokens: max_output_tokens,
// 0 for none).
func responsesBody(model string, maxTokens int, stream bool) []byte {
	m := map[string]any{"model": model, "instructions": "Answer in verse.",
		"input": []map[string]any{{"role": "user", "content": []map[string]string{{"type": "input_text", "text": "Write a haiku about token buckets."}}}}}
	if maxTokens > 0 {
		m["max_output_tokens"] = maxTokens
	}
	return streamed(m, stream)
}

// streamed is the body m, asking for a stream if stream.
func streamed(m map[string]any, stream bool) []byte {
	if stream {
		m["stream"] = true
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// embeddingsBody is an /v1/embeddings request.
func embeddingsBody(model string) []byte {
	b, err := json.Marshal(map[string]any{
		"model": model,
		"input": []string{"sliding windows count requests", "token buckets refill over time"},
	})
	if err != nil {
		panic(err)
	}
	return b
}

// ---- answers ----

// checkErrorShape checks an OpenAI-shaped error body and returns it.
func checkErrorShape(t testing.TB, r reply, wantCode string) map[string]any {
	t.Helper()
	var body struct {
		Error map[string]any `json:"error"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil || body.Error == nil {
		t.Fatalf("answer %s is not {\"error\":{…}} (%v)", r, err)
	}
	for _, f := range []string{"message", "type"} {
		if s, ok := body.Error[f].(string); !ok || s == "" {
			t.Errorf("error.%s is %#v, want a non-empty string (answer %s)", f, body.Error[f], r)
		}
	}
	if _, ok := body.Error["code"]; !ok {
		t.Errorf("error has no code field (answer %s)", r)
	}
	if wantCode != "" && body.Error["code"] != wantCode {
		t.Errorf("error.code = %#v, want %q (answer %s)", body.Error["code"], wantCode, r)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("error Content-Type = %q, want application/json", ct)
	}
	return body.Error
}

var rateHeaders = []string{
	"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests",
	"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens",
}

// rateLimits are the x-ratelimit-* headers of an answer, parsed.
type rateLimits struct {
	limitReq, remainingReq, limitTok, remainingTok int64
	resetReq, resetTok                             time.Duration
}

// checkRateHeaders checks that all six x-ratelimit-* headers and
// x-ringgate-node are there and well formed, and returns their values.
func (e *env) checkRateHeaders(r reply) rateLimits {
	e.t.Helper()
	if got := r.header.Get("x-ringgate-node"); got != e.cfg.Node.Name {
		e.t.Errorf("x-ringgate-node = %q, want %q", got, e.cfg.Node.Name)
	}
	var rl rateLimits
	for _, h := range rateHeaders {
		v := r.header.Get(h)
		if v == "" {
			e.t.Errorf("header %s missing (answer %s, headers %v)", h, r, r.header)
			continue
		}
		var err error
		switch h {
		case "x-ratelimit-limit-requests":
			rl.limitReq, err = strconv.ParseInt(v, 10, 64)
		case "x-ratelimit-remaining-requests":
			rl.remainingReq, err = strconv.ParseInt(v, 10, 64)
		case "x-ratelimit-limit-tokens":
			rl.limitTok, err = strconv.ParseInt(v, 10, 64)
		case "x-ratelimit-remaining-tokens":
			rl.remainingTok, err = strconv.ParseInt(v, 10, 64)
		case "x-ratelimit-reset-requests":
			rl.resetReq, err = time.ParseDuration(v)
		case "x-ratelimit-reset-tokens":
			rl.resetTok, err = time.ParseDuration(v)
		}
		if err != nil {
			e.t.Errorf("header %s = %q: %v", h, v, err)
		}
	}
	// A reset is never more than a window (plus the bucket that straddles
	// its edge) away.
	maxReset := e.cfg.Limits.Window + e.cfg.Limits.Window/64 + time.Millisecond
	for _, d := range []time.Duration{rl.resetReq, rl.resetTok} {
		if d < 0 || d > maxReset {
			e.t.Errorf("reset %s outside [0, %s]", d, maxReset)
		}
	}
	return rl
}

// ---- server-sent events ----

type sseEvent struct {
	name string // "event:" field; empty for OpenAI
	data string // the data lines joined by "\n"
}

// readEvent reads one SSE event; io.EOF at the end of the stream.
func readEvent(br *bufio.Reader) (sseEvent, error) {
	var ev sseEvent
	var data []string
	seen := false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && line == "" && seen {
				ev.data = strings.Join(data, "\n")
				return ev, nil
			}
			if errors.Is(err, io.EOF) && line == "" {
				return ev, io.EOF
			}
			if !errors.Is(err, io.EOF) {
				return ev, err
			}
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if !seen {
				continue
			}
			ev.data = strings.Join(data, "\n")
			return ev, nil
		}
		seen = true
		switch {
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		case strings.HasPrefix(line, "event:"):
			ev.name = strings.TrimPrefix(strings.TrimPrefix(line, "event:"), " ")
		}
	}
}

// readAllEvents reads the rest of a stream.
func readAllEvents(t testing.TB, br *bufio.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	for {
		ev, err := readEvent(br)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("reading the stream after %d events: %v", len(out), err)
		}
		out = append(out, ev)
	}
}

// ---- JSON helpers ----

func jsonMap(t testing.TB, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, truncate(string(b), 300))
	}
	return m
}

// num reads a number at a dotted path of a decoded JSON object.
func num(m map[string]any, path string) (int64, bool) {
	var v any = m
	for _, k := range strings.Split(path, ".") {
		mm, ok := v.(map[string]any)
		if !ok {
			return 0, false
		}
		v = mm[k]
	}
	f, ok := v.(float64)
	if !ok || f != math.Trunc(f) {
		return 0, false
	}
	return int64(f), true
}

// ---- sliding windows ----

// event in time with a weight (1 per request, or its tokens).
type weighted struct {
	at time.Time
	w  int64
}

// maxSliding is the largest total weight of events inside any interval
// [t, t+span) that starts at an event.
func maxSliding(evs []weighted, span time.Duration) (worst int64, at time.Time) {
	w := audit.MaxWeightIn(auditEvents(evs), span)
	return w.Weight, w.First
}

// fixedWindows sums the events in consecutive windows [start+k*span,
// start+(k+1)*span) that end no later than end.
func fixedWindows(evs []weighted, start, end time.Time, span time.Duration) []int64 {
	aevs := auditEvents(evs)
	var out []int64
	for s := start; !s.Add(span).After(end); s = s.Add(span) {
		out = append(out, audit.WeightIn(aevs, s, s.Add(span)))
	}
	return out
}

func auditEvents(evs []weighted) []audit.Event {
	out := make([]audit.Event, len(evs))
	for i, e := range evs {
		out[i] = audit.Event{At: e.at, Weight: e.w}
	}
	return out
}

// metricValue finds the sample of a Prometheus text exposition whose name
// is name and whose labels include the given name/value pairs; NaN if none.
func metricValue(exposition, name string, labels ...string) float64 {
	for _, line := range strings.Split(exposition, "\n") {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		lbls, val, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(","+lbls+",", ","+labels[i]+"="+strconv.Quote(labels[i+1])+",") {
				match = false
			}
		}
		if !match {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return math.NaN()
		}
		return f
	}
	return math.NaN()
}

// retryAfterMs reads retry-after-ms (0 if absent).
func retryAfterMs(h http.Header) time.Duration {
	ms, err := strconv.ParseInt(h.Get("retry-after-ms"), 10, 64)
	if err != nil || ms < 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

// closedPort is an address nothing listens on.
func closedPort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
