package admin

import (
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/router/internal/hopsign"
	"github.com/ringgate/ringgate/router/internal/status"
)

// fakeNode is a Source and Peers: node "a", tenant "acme" and team "research"
// owned by owner, members asked through ask.
type fakeNode struct {
	owner    string
	members  []string
	signed   bool
	verify   error
	mu       sync.Mutex
	asked    []string // "node uri", in the order asked
	answers  map[string]string
	draining bool
	ready    bool
	reload   func(string) (status.Reload, bool)
}

func (f *fakeNode) Tenant(name string) (string, func(owner, ownerError string) status.Tenant, bool) {
	if name != "acme" {
		return "", nil, false
	}
	return "acme", func(owner, ownerError string) status.Tenant {
		return status.Tenant{Name: name, Owner: owner, Node: "a", OwnerError: ownerError}
	}, true
}

func (f *fakeNode) Team(name string) (string, func(owner, ownerError string) status.Team, bool) {
	if name != "research" {
		return "", nil, false
	}
	return "team/research", func(owner, ownerError string) status.Team {
		return status.Team{Name: name, Owner: owner, Node: "a", OwnerError: ownerError}
	}, true
}

func (f *fakeNode) Cluster() status.Cluster { return status.Cluster{Self: "a", RingVersion: 7} }

func (f *fakeNode) Upstreams() status.Upstreams {
	return status.Upstreams{Node: "a", Upstreams: []status.Upstream{{Name: "openai", Kind: "openai"}}}
}

func (f *fakeNode) Owner(string) string                { return f.owner }
func (f *fakeNode) Verify(req *fasthttp.Request) error { return f.verify }

func (f *fakeNode) View() View {
	if f.members == nil {
		return View{Signed: f.signed}
	}
	addrs := make(map[string]string, len(f.members))
	for _, m := range f.members {
		addrs[m] = m + ":1"
	}
	return View{Members: f.members, Addrs: addrs, Signed: f.signed, Ask: f.ask}
}

func (f *fakeNode) ask(addr, node, uri string, timeout time.Duration) (int, []byte, error) {
	f.mu.Lock()
	f.asked = append(f.asked, node+" "+uri)
	f.mu.Unlock()
	if addr != node+":1" || timeout != OwnerViewTimeout {
		return 0, nil, errors.New("asked at the wrong address or timeout")
	}
	body, ok := f.answers[node]
	if !ok {
		return 0, nil, errors.New(node + " unreachable")
	}
	if body == "404" {
		return fasthttp.StatusNotFound, []byte("no such"), nil
	}
	return fasthttp.StatusOK, []byte(body), nil
}

func newHandler(f *fakeNode, token string) *Handler {
	if f.reload == nil {
		f.reload = func(string) (status.Reload, bool) { return status.Reload{}, false }
	}
	return New(Config{Node: "a", Source: f, Peers: f, Token: func() string { return token },
		Life:   func() (bool, bool) { return f.draining, f.ready },
		Reload: func(trigger string) (status.Reload, bool) { return f.reload(trigger) }, Metrics: prometheus.NewRegistry()})
}

// do serves one request from remote and returns its status and body.
func do(h *Handler, method, uri, remote string, headers ...string) (int, string, *fasthttp.Response) {
	var req fasthttp.Request
	req.Header.SetMethod(method)
	req.SetRequestURI(uri)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(remote), Port: 4000}, nil)
	h.Serve(&ctx)
	return ctx.Response.StatusCode(), string(ctx.Response.Body()), &ctx.Response
}

func errorCode(t *testing.T, body string) string {
	t.Helper()
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("not an error body: %q", body)
	}
	return e.Error.Code
}

func TestAccessRule(t *testing.T) {
	f := &fakeNode{ready: true}
	open := newHandler(f, "")
	if code, _, _ := do(open, "GET", "/cluster", "127.0.0.1"); code != 200 {
		t.Fatalf("loopback, no token: %d, want 200", code)
	}
	if code, body, _ := do(open, "GET", "/cluster", "10.0.0.9"); code != 401 || errorCode(t, body) != "invalid_admin_token" {
		t.Fatalf("remote, no token: %d %s, want 401 invalid_admin_token", code, body)
	}
	if code, _, _ := do(open, "GET", "/healthz", "10.0.0.9"); code != 200 {
		t.Fatalf("healthz is open: %d", code)
	}
	tok := newHandler(f, "s3cret")
	for _, tc := range []struct {
		auth string
		want int
	}{{"Bearer s3cret", 200}, {"bearer  s3cret ", 200}, {"Bearer other", 401}, {"s3cret", 401}, {"", 401}} {
		if code, _, _ := do(tok, "GET", "/cluster", "127.0.0.1", "Authorization", tc.auth); code != tc.want {
			t.Errorf("Authorization %q: %d, want %d", tc.auth, code, tc.want)
		}
	}
}

func TestPathsAndMethods(t *testing.T) {
	h := newHandler(&fakeNode{}, "")
	if code, body, _ := do(h, "GET", "/nope", "127.0.0.1"); code != 404 || errorCode(t, body) != "not_found" {
		t.Fatalf("unknown path: %d %s", code, body)
	}
	code, body, resp := do(h, "POST", "/cluster", "127.0.0.1")
	if code != 405 || errorCode(t, body) != "method_not_allowed" || string(resp.Header.Peek("Allow")) != "GET" {
		t.Fatalf("POST /cluster: %d %s Allow %q", code, body, resp.Header.Peek("Allow"))
	}
	if _, _, resp := do(h, "GET", "/admin/reload", "127.0.0.1"); string(resp.Header.Peek("Allow")) != "POST" {
		t.Fatalf("GET /admin/reload: Allow %q, want POST", resp.Header.Peek("Allow"))
	}
	if code, body, _ := do(h, "GET", "/cluster", "127.0.0.1"); code != 200 || !strings.Contains(body, `"ring_version":7`) {
		t.Fatalf("/cluster: %d %s", code, body)
	}
	if code, body, _ := do(h, "GET", "/metrics", "127.0.0.1"); code != 200 || strings.Contains(body, "error") {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	if code, body, _ := do(h, "GET", "/tenants/nobody", "127.0.0.1"); code != 404 || errorCode(t, body) != "unknown_tenant" {
		t.Fatalf("unknown tenant: %d %s", code, body)
	}
	if code, body, _ := do(h, "GET", "/teams/nobody", "127.0.0.1"); code != 404 || errorCode(t, body) != "unknown_team" {
		t.Fatalf("unknown team: %d %s", code, body)
	}
}

func TestReadyz(t *testing.T) {
	f := &fakeNode{}
	h := newHandler(f, "")
	for _, tc := range []struct {
		draining, ready bool
		code            int
		status          string
	}{{false, false, 503, "joining"}, {false, true, 200, "ready"}, {true, true, 503, "draining"}} {
		f.draining, f.ready = tc.draining, tc.ready
		code, body, _ := do(h, "GET", "/readyz", "10.0.0.9")
		if code != tc.code || body != `{"status":"`+tc.status+`"}` {
			t.Errorf("draining %v ready %v: %d %s, want %d %s", tc.draining, tc.ready, code, body, tc.code, tc.status)
		}
	}
}

func TestReload(t *testing.T) {
	f := &fakeNode{}
	h := newHandler(f, "")
	if code, body, _ := do(h, "POST", "/admin/reload", "127.0.0.1"); code != 409 || errorCode(t, body) != "no_config_source" {
		t.Fatalf("no reloader: %d %s", code, body)
	}
	var trigger string
	res := status.Reload{Error: "bad line 3"}
	f.reload = func(tr string) (status.Reload, bool) { trigger = tr; return res, true }
	if code, body, _ := do(h, "POST", "/admin/reload", "127.0.0.1"); code != 400 || errorCode(t, body) != "invalid_config" ||
		!strings.Contains(body, "bad line 3") || trigger != "admin" {
		t.Fatalf("refused config: %d %s (trigger %q)", code, body, trigger)
	}
	res = status.Reload{OK: true, ConfigVersion: "v2"}
	if code, body, _ := do(h, "POST", "/admin/reload", "127.0.0.1"); code != 200 || !strings.Contains(body, `"config_version":"v2"`) {
		t.Fatalf("reloaded: %d %s", code, body)
	}
}

func TestPeerQuestion(t *testing.T) {
	f := &fakeNode{owner: "b", verify: errors.New("bad signature")}
	h := newHandler(f, "s3cret")
	// A member's question needs its signature, not the admin token.
	if code, body, _ := do(h, "GET", "/tenants/acme", "10.0.0.9", hopsign.HopHeader, "b"); code != 401 || errorCode(t, body) != "invalid_peer_signature" {
		t.Fatalf("bad signature: %d %s", code, body)
	}
	f.verify = nil
	// This node's ring names another owner: refused, never passed on.
	if code, body, _ := do(h, "GET", "/tenants/acme", "10.0.0.9", hopsign.HopHeader, "b"); code != 409 || errorCode(t, body) != "not_owner" {
		t.Fatalf("not the owner: %d %s", code, body)
	}
	f.owner = "a"
	if code, body, _ := do(h, "GET", "/teams/research", "10.0.0.9", hopsign.HopHeader, "b"); code != 200 || !strings.Contains(body, `"owner":"a"`) {
		t.Fatalf("owned here: %d %s", code, body)
	}
	// Other paths still need the token.
	if code, _, _ := do(h, "GET", "/cluster", "10.0.0.9", hopsign.HopHeader, "b"); code != 401 {
		t.Fatalf("/cluster from a peer without the token: %d", code)
	}
}

func TestOwnerView(t *testing.T) {
	f := &fakeNode{owner: "b", members: []string{"a", "b"}, signed: true, answers: map[string]string{"b": `{"name":"acme","node":"b"}`}}
	h := newHandler(f, "")
	if code, body, _ := do(h, "GET", "/tenants/acme?x=1", "127.0.0.1"); code != 200 || body != f.answers["b"] {
		t.Fatalf("owner's view: %d %s", code, body)
	}
	if len(f.asked) != 1 || f.asked[0] != "b /tenants/acme?x=1" {
		t.Fatalf("asked %q", f.asked)
	}
	var v status.Tenant
	_, body, _ := do(h, "GET", "/tenants/acme?local=1", "127.0.0.1")
	if json.Unmarshal([]byte(body), &v) != nil || v.Owner != "b" || v.Node != "a" || v.OwnerError != "" || len(f.asked) != 1 {
		t.Fatalf("local view: %s (asked %q)", body, f.asked)
	}
	f.answers["b"] = "404"
	_, body, _ = do(h, "GET", "/teams/research", "127.0.0.1")
	if json.Unmarshal([]byte(body), &v) != nil || v.Owner != "b" || v.OwnerError != "b answered 404: no such" {
		t.Fatalf("owner answering 404: %s", body)
	}
	f.signed = false
	_, body, _ = do(h, "GET", "/tenants/acme", "127.0.0.1")
	if json.Unmarshal([]byte(body), &v) != nil || v.OwnerError != "no address for the owner, or no cluster secret to ask it with" {
		t.Fatalf("no secret: %s", body)
	}
}

func TestUpstreamsAsksEveryOtherMember(t *testing.T) {
	f := &fakeNode{members: []string{"a", "b", "c", "d"}, signed: true,
		answers: map[string]string{"b": `{"node":"b","upstreams":[{"name":"openai","kind":"openai"}]}`, "c": "not json"}}
	h := newHandler(f, "")
	var v status.Upstreams
	_, body, _ := do(h, "GET", "/upstreams", "127.0.0.1")
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.Node != "a" || len(v.Peers) != 3 {
		t.Fatalf("/upstreams: %s", body)
	}
	b, c, d := v.Peers[0], v.Peers[1], v.Peers[2]
	if b.Node != "b" || b.Error != "" || len(b.Upstreams) != 1 ||
		c.Node != "c" || c.Error != "c answered what is not its view: not json" ||
		d.Node != "d" || d.Error != "d unreachable" {
		t.Fatalf("peers: %+v", v.Peers)
	}
	for _, q := range f.asked {
		if !strings.HasSuffix(q, " /upstreams?local=1") {
			t.Fatalf("asked %q", q)
		}
	}
	f.asked = nil
	_, body, _ = do(h, "GET", "/upstreams?local=1", "127.0.0.1")
	if strings.Contains(body, "peers") || f.asked != nil {
		t.Fatalf("local: %s, asked %q", body, f.asked)
	}
	f.signed = false
	_, body, _ = do(h, "GET", "/upstreams", "127.0.0.1")
	if err := json.Unmarshal([]byte(body), &v); err != nil || len(v.Peers) != 3 || v.Peers[0].Error != "no cluster secret to ask it with" {
		t.Fatalf("no secret: %s", body)
	}
	f.members = nil
	if _, body, _ = do(h, "GET", "/upstreams", "127.0.0.1"); strings.Contains(body, "peers") {
		t.Fatalf("alone: %s", body)
	}
}
