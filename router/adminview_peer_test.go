package router

// GET /tenants/{name} and /teams/{name} from any node, asked of the owner
// with a signed GET, against what a reviewer tried: an owner cut off
// mid-answer, rings that disagree, a connect that outlasts the second
// (each failed on the first version), escaped names, replayed and
// re-targeted peer questions, a node without a secret, and the peer state
// API hops rely on.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/reserve"
	"github.com/ringgate/ringgate/ring"
	"github.com/ringgate/ringgate/router/internal/admin"
	"github.com/ringgate/ringgate/router/internal/status"
)

const viewAdminToken = "review-admin-token"

// viewPair is two clustered routers a and b on loopback over the ring {a, b},
// with the given tenants, the cluster secret, and an admin token (so that
// nothing passes for being on loopback).
type viewPair struct {
	a, b         *Router
	addrA, addrB string
	ring         *ring.Ring
	tenants      []string
}

// ownedBy is one of p's tenants that node owns by p's ring.
func (p *viewPair) ownedBy(t *testing.T, node string) string {
	t.Helper()
	for _, n := range p.tenants {
		if o, _ := p.ring.Owner(n); o == node {
			return n
		}
	}
	t.Fatalf("no tenant owned by %s", node)
	return ""
}

func newViewPair(t *testing.T, tenants []string, tweakA func(*config.Config)) *viewPair {
	t.Helper()
	tok, err := reserve.NewTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	secret := bytes.Repeat([]byte{9}, 32)
	mk := func(name string, tweak func(*config.Config)) (*Router, string) {
		cfg := config.Default()
		cfg.Node.Name = name
		cfg.Node.Gossip = "127.0.0.1:0"
		cfg.Cluster.Secret = secret
		cfg.Cluster.HopSkew = 5 * time.Second
		cfg.Admin.Token = viewAdminToken
		cfg.Upstreams = []config.Upstream{{
			Name: "openai", Kind: config.KindOpenAI, BaseURL: "http://127.0.0.1:1", Models: []string{"gpt-4o-mini"},
			Timeout: 10 * time.Second, ConnectTimeout: time.Second, StreamIdleTimeout: 10 * time.Second,
			AnthropicVersion: config.DefaultAnthropicVersion,
		}}
		for i, n := range tenants {
			cfg.Tenants = append(cfg.Tenants, config.Tenant{Name: n, Keys: []string{"sk-rv-" + string(rune('a'+i))},
				RPM: 100, TPM: 1 << 30, Concurrency: 100, Priority: config.PriorityInteractive})
		}
		if tweak != nil {
			tweak(cfg)
		}
		r, err := New(Options{Config: cfg, Tokenizer: tok, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return r, serveRouter(t, r)
	}
	p := &viewPair{ring: ring.New(1, []string{"a", "b"}), tenants: tenants}
	p.a, p.addrA = mk("a", tweakA)
	p.b, p.addrB = mk("b", nil)
	v := View{Ring: p.ring, Members: []Member{{Name: "a", Addr: p.addrA, State: "active"}, {Name: "b", Addr: p.addrB, State: "active"}}}
	p.a.SetView(v)
	p.b.SetView(v)
	return p
}

func (p *viewPair) addr(node string) string {
	if node == "a" {
		return p.addrA
	}
	return p.addrB
}

type peerView struct {
	Name       string `json:"name"`
	Owner      string `json:"owner"`
	Node       string `json:"node"`
	OwnerError string `json:"owner_error"`
	Error      struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

type viewReply struct {
	status int
	ctype  string
	body   []byte
	view   peerView
	jsonOK bool
	took   time.Duration
}

// viewDo sends req as it is (no path normalizing) to addr.
func viewDo(t *testing.T, addr string, req *fasthttp.Request) viewReply {
	t.Helper()
	hc := &fasthttp.HostClient{Addr: addr, DisablePathNormalizing: true, NoDefaultUserAgentHeader: true}
	defer hc.CloseIdleConnections()
	req.URI().SetHost(addr) // not signed; the URI's host is what Write sends
	req.Header.SetHost(addr)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	start := time.Now()
	if err := hc.DoTimeout(req, resp, 20*time.Second); err != nil {
		t.Fatalf("%s %s: %v", req.Header.Method(), req.RequestURI(), err)
	}
	r := viewReply{status: resp.StatusCode(), ctype: string(resp.Header.ContentType()),
		body: append([]byte(nil), resp.Body()...), took: time.Since(start)}
	r.jsonOK = json.Unmarshal(r.body, &r.view) == nil
	return r
}

// viewGet is an admin's GET of rawURI (sent as is) on addr.
func viewGet(t *testing.T, addr, rawURI string) viewReply {
	t.Helper()
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI(rawURI)
	req.URI().DisablePathNormalizing = true
	req.Header.Set("Authorization", "Bearer "+viewAdminToken)
	return viewDo(t, addr, req)
}

// TestTenantViewOwnerCutMidAnswer: an owner that dies (or
// stalls past the 1 s) after its answer's headers, before the end of its
// body. The peers' HostClient streams response bodies, and fasthttp's
// Response.Body() then returns the read error's text in place of the body
// (it never reports the error): a peer call reading Body() returns status
// 200 with that text, and fromOwner would relay it as the owner's view (body
// "unexpected EOF"). Want: the edge's own view with owner_error.
func TestTenantViewOwnerCutMidAnswer(t *testing.T) {
	p := newViewPair(t, []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"}, nil)
	tenant := p.ownedBy(t, "b")
	// "b" at an address where a process answers the headers and part of
	// the body, then goes (killed mid-answer) or stops (paused past the
	// 1 s).
	for _, mode := range []string{"gone", "paused"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			for {
				line, err := br.ReadString('\n')
				if err != nil || line == "\r\n" {
					break
				}
			}
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{\"name\":\"")
			if mode == "paused" {
				_, _ = br.ReadByte() // until the edge gives up and closes
			}
		}()
		p.a.SetView(View{Ring: p.ring, Members: []Member{{Name: "a", Addr: p.addrA, State: "active"}, {Name: "b", Addr: ln.Addr().String(), State: "active"}}})
		r := viewGet(t, p.addrA, "/tenants/"+tenant)
		_ = ln.Close()
		<-done
		if r.status != fasthttp.StatusOK || !r.jsonOK || r.view.Node != "a" || r.view.OwnerError == "" {
			t.Errorf("owner %s mid-answer: %d %q %q after %s, want 200 JSON: the edge's own view with owner_error",
				mode, r.status, r.ctype, r.body, r.took.Round(time.Millisecond))
		}
	}
}

// TestTenantViewRingsDisagree: a ring change under way
// (b has left the ring or handed the tenant to a; a's gossip has not caught
// up). a asks b; b answered a peer with its own view, which names a as the
// owner, and a relayed it with no owner_error (the first version). The docs
// (operations.md): "`node`: the node whose view this is: the owner, unless
// `owner_error` or `?local=1`". Here node is b, owner a, no owner_error:
// the figures are a non-owner's (empty once it handed the tenant over),
// presented as the owner's view.
func TestTenantViewRingsDisagree(t *testing.T) {
	p := newViewPair(t, []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"}, nil)
	tenant := p.ownedBy(t, "b")
	// b's newer ring: a alone (b leaving); a still has {a, b}.
	p.b.SetView(View{Ring: ring.New(2, []string{"a"}), Members: []Member{
		{Name: "a", Addr: p.addrA, State: "active"}, {Name: "b", Addr: p.addrB, State: "draining"}}})
	r := viewGet(t, p.addrA, "/tenants/"+tenant)
	if r.status != fasthttp.StatusOK || !r.jsonOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if r.view.OwnerError == "" && r.view.Node != r.view.Owner {
		t.Fatalf("relayed as the owner's view: node %q, owner %q, no owner_error (%s); want node == owner, or owner_error",
			r.view.Node, r.view.Owner, r.body)
	}
}

// blackholeAddr returns a loopback address whose SYNs are dropped: a
// listener with a backlog of 0 whose accept queue is full (Linux drops a
// SYN to a listener with a full accept queue), as a partitioned or dead
// host looks.
func blackholeAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Skip(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Skip(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Skip(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	for range 16 {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return addr
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	t.Skip("could not fill the accept queue: no blackhole on this kernel")
	return ""
}

// TestTenantViewConnectWithinTimeout: "at most 1 s"
// (docs/operations.md, admin.OwnerViewTimeout) is not what the edge waits for an
// owner whose host drops the connection attempt (a dead host, a
// partition). fasthttp does not bound a HostClient's own Dial with the
// request's timeout (only DialTimeout gets it), and the peers' dial is
// forward_connect_timeout, then, the peer having no connect timeouts
// counted (fromOwner never counts any), a patient second attempt of
// 10 × forward_connect_timeout: 11 × forward_connect_timeout in all. With
// the default 15 ms that is 165 ms; with forward_connect_timeout = 150ms,
// 1.65 s; with 1s, 11 s, for every admin GET (fromOwner ignores downUntil).
func TestTenantViewConnectWithinTimeout(t *testing.T) {
	p := newViewPair(t, []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"}, func(c *config.Config) {
		c.Cluster.ForwardConnectTimeout = 150 * time.Millisecond
	})
	tenant := ""
	for _, n := range []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"} {
		if o, _ := p.ring.Owner(n); o == "b" {
			tenant = n
			break
		}
	}
	hole := blackholeAddr(t)
	p.a.SetView(View{Ring: p.ring, Members: []Member{{Name: "a", Addr: p.addrA, State: "active"}, {Name: "b", Addr: hole, State: "active"}}})
	r := viewGet(t, p.addrA, "/tenants/"+tenant)
	t.Logf("owner blackholed: %d in %s, owner_error %q", r.status, r.took.Round(time.Millisecond), r.view.OwnerError)
	if r.status != fasthttp.StatusOK || r.view.OwnerError == "" {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if r.took > admin.OwnerViewTimeout+300*time.Millisecond {
		t.Fatalf("the edge waited %s for an unreachable owner, want at most about %s", r.took.Round(time.Millisecond), admin.OwnerViewTimeout)
	}
}

// TestTenantViewEscapedNames: tenant names the config allows (no
// '/', spaces or control characters) that need escaping in a path, and a
// query string carried along: what the edge signs (the PathOriginal and
// query of ctx.URI().RequestURI(), already normalized and quoted) is what
// fasthttp writes and what the owner verifies; the owner's view comes back.
func TestTenantViewEscapedNames(t *testing.T) {
	names := []string{"a%b", "a?b", "a#b", "üñí€", `a"b`, "a!b", "a+b", "a;b=c", "x%41", "a%2Fb", "a\\b", "[x]", "a&b", "~a.b-c_d"}
	p := newViewPair(t, names, nil)
	for _, n := range names {
		owner, _ := p.ring.Owner(n)
		edge := "a"
		if owner == "a" {
			edge = "b"
		}
		for _, q := range []string{"", "?x=%ZZ&y=a+b&local=0&z", "?local=no"} {
			uri := "/tenants/" + url.PathEscape(n) + q
			r := viewGet(t, p.addr(edge), uri)
			if r.status != fasthttp.StatusOK || r.view.Name != n || r.view.Node != owner || r.view.OwnerError != "" {
				t.Errorf("GET %s on %s (owner %s): %d %s", uri, edge, owner, r.status, r.body)
			}
		}
	}
}

// signedAs is a GET of uri signed by a as a question to "to".
func signedAs(p *viewPair, method, uri, to string, body []byte) *fasthttp.Request {
	req := fasthttp.AcquireRequest()
	req.Header.SetMethod(method)
	req.SetRequestURI(uri)
	if body != nil {
		req.Header.SetContentType("application/json")
		req.SetBody(body)
	}
	p.a.hops.Sign(req, "a", to, 1, 1)
	return req
}

// TestTenantViewPeerQuestionReplayRetarget: a captured peer question
// cannot be replayed, sent to another node, to another path or with
// another query, and opens no other admin path; a captured API hop cannot
// be made into a peer question; a client cannot pass for a peer.
func TestTenantViewPeerQuestionReplayRetarget(t *testing.T) {
	tenants := []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"}
	p := newViewPair(t, tenants, nil)
	tenant := p.ownedBy(t, "b")
	code := func(r viewReply) string { return r.view.Error.Code }

	// The genuine question, then its replay.
	req := signedAs(p, "GET", "/tenants/"+tenant, "b", nil)
	if r := viewDo(t, p.addrB, req); r.status != 200 || r.view.Node != "b" {
		t.Fatalf("a signed question: %d %s", r.status, r.body)
	}
	if r := viewDo(t, p.addrB, req); r.status != 401 || code(r) != "invalid_peer_signature" || !strings.Contains(r.view.Error.Message, "replayed") {
		t.Errorf("replayed: %d %s", r.status, r.body)
	}
	// To another node.
	if r := viewDo(t, p.addrA, signedAs(p, "GET", "/tenants/"+tenant, "b", nil)); r.status != 401 || code(r) != "invalid_peer_signature" {
		t.Errorf("sent to a: %d %s", r.status, r.body)
	}
	// Another path, another query.
	for _, other := range []string{"/teams/" + tenant, "/tenants/" + tenant + "?local=1", "/tenants/" + tenant + "x"} {
		req := signedAs(p, "GET", "/tenants/"+tenant, "b", nil)
		req.SetRequestURI(other)
		if r := viewDo(t, p.addrB, req); r.status != 401 || code(r) != "invalid_peer_signature" {
			t.Errorf("re-targeted to %s: %d %s", other, r.status, r.body)
		}
	}
	// A valid signature on any other admin path: the admin token is still
	// needed.
	for _, other := range []string{"/cluster", "/metrics", "/debug/pprof/", "/tenants/../cluster"} {
		req := signedAs(p, "GET", other, "b", nil)
		if r := viewDo(t, p.addrB, req); r.status != 401 || code(r) != "invalid_admin_token" {
			t.Errorf("signed GET %s without the admin token: %d %.200s", other, r.status, r.body)
		}
	}
	// /upstreams is a peer's question too (peerUpstreams): answered with
	// the node's own view alone, never passed on.
	if r := viewDo(t, p.addrB, signedAs(p, "GET", "/upstreams", "b", nil)); r.status != 200 ||
		!bytes.Contains(r.body, []byte(`"node":"b"`)) || bytes.Contains(r.body, []byte(`"peers"`)) {
		t.Errorf("signed GET /upstreams: %d %.200s, want b's own view without peers", r.status, r.body)
	}
	if r := viewDo(t, p.addrB, signedAs(p, "POST", "/admin/reload", "b", []byte("{}"))); r.status != 401 {
		t.Errorf("signed POST /admin/reload without the admin token: %d %.200s", r.status, r.body)
	}
	// A captured API hop made into a view question.
	api := signedAs(p, "POST", "/v1/chat/completions", "b", []byte(`{"model":"gpt-4o-mini","messages":[]}`))
	api.Header.SetMethod("GET")
	api.SetRequestURI("/tenants/" + tenant)
	api.ResetBody()
	if r := viewDo(t, p.addrB, api); r.status != 401 || code(r) != "invalid_peer_signature" {
		t.Errorf("API hop as a view question: %d %s", r.status, r.body)
	}
	// A client's forged headers, with and without the admin token.
	for _, tok := range []string{"", viewAdminToken} {
		req := fasthttp.AcquireRequest()
		req.SetRequestURI("/tenants/" + tenant)
		req.Header.Set(hopHeader, "a,b,1,"+strconv.Itoa(int(time.Now().UnixMilli()))+",000000000000000000000000")
		req.Header.Set(sigHeader, "00")
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		if r := viewDo(t, p.addrB, req); r.status != 401 || r.view.Node != "" {
			t.Errorf("forged peer headers (token %q): %d %s", tok, r.status, r.body)
		}
	}
}

// TestTenantViewNoSecret: a single node without cluster.secret, no admin
// token (loopback is admin), and a client sending the hop header: refused,
// nothing shown; without it the loopback caller is served.
func TestTenantViewNoSecret(t *testing.T) {
	cfg := config.Default()
	cfg.Node.Name = "solo"
	cfg.Upstreams = []config.Upstream{{
		Name: "openai", Kind: config.KindOpenAI, BaseURL: "http://127.0.0.1:1", Models: []string{"gpt-4o-mini"},
		Timeout: 10 * time.Second, ConnectTimeout: time.Second, StreamIdleTimeout: 10 * time.Second,
		AnthropicVersion: config.DefaultAnthropicVersion,
	}}
	cfg.Tenants = []config.Tenant{{Name: "solo-t", Keys: []string{"sk-solo"}, RPM: 10}}
	tok, err := reserve.NewTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Options{Config: cfg, Tokenizer: tok, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveRouter(t, r)
	req := fasthttp.AcquireRequest()
	req.SetRequestURI("/tenants/solo-t")
	req.Header.Set(hopHeader, "x,solo,1,"+strconv.Itoa(int(time.Now().UnixMilli()))+",000000000000000000000000")
	req.Header.Set(sigHeader, "00")
	if got := viewDo(t, addr, req); got.status != 401 || got.view.Node != "" {
		t.Errorf("hop header, no secret: %d %s", got.status, got.body)
	}
	req2 := fasthttp.AcquireRequest()
	req2.SetRequestURI("/tenants/solo-t")
	if got := viewDo(t, addr, req2); got.status != 200 || got.view.Node != "solo" || got.view.Owner != "solo" {
		t.Errorf("loopback admin: %d %s", got.status, got.body)
	}
}

// TestTenantViewLeavesPeerStateAlone: admin GETs to an owner that
// refuses connections, or accepts and never answers (paused), end in the
// edge's own view with owner_error, within about 1 s, with one connection
// attempt each, and do not mark the peer down or count its connect
// timeouts (what API requests' fallback decides on).
func TestTenantViewLeavesPeerStateAlone(t *testing.T) {
	tenants := []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"}
	p := newViewPair(t, tenants, nil)
	tenant := p.ownedBy(t, "b")
	// Refused.
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := refused.Addr().String()
	_ = refused.Close()
	// Silent: accepts, counts, never answers.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = silent.Close() })
	var mu sync.Mutex
	var conns []net.Conn
	reqs := 0
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if line == "\r\n" {
						mu.Lock()
						reqs++
						mu.Unlock()
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for _, tc := range []struct{ name, addr string }{{"refused", refusedAddr}, {"silent", silent.Addr().String()}} {
		p.a.SetView(View{Ring: p.ring, Members: []Member{{Name: "a", Addr: p.addrA, State: "active"}, {Name: "b", Addr: tc.addr, State: "active"}}})
		for range 2 {
			r := viewGet(t, p.addrA, "/tenants/"+tenant)
			t.Logf("%s: %d in %s: %q", tc.name, r.status, r.took.Round(time.Millisecond), r.view.OwnerError)
			if r.status != 200 || r.view.Node != "a" || r.view.OwnerError == "" || r.took > admin.OwnerViewTimeout+300*time.Millisecond {
				t.Errorf("%s: %d in %s: %s", tc.name, r.status, r.took, r.body)
			}
		}
		if p.a.peers.Down(tc.addr) {
			t.Errorf("%s: admin GETs marked the peer down", tc.name)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if reqs != 2 {
		t.Errorf("the silent owner got %d requests for 2 admin GETs", reqs)
	}
}

// TestUpstreamsViewAsksEveryMember: GET /upstreams answers with this
// node's leases and, under peers, every other member's own view, asked of
// it with a signed GET (interface: leases per node). ?local=1 leaves the
// peers out; a member that cannot be reached is listed with the error; a
// peer's question without a valid signature is refused.
func TestUpstreamsViewAsksEveryMember(t *testing.T) {
	p := newViewPair(t, []string{"t0", "t1"}, nil)
	get := func(addr, uri string) (viewReply, status.Upstreams) {
		t.Helper()
		r := viewGet(t, addr, uri)
		var uv status.Upstreams
		if r.status != fasthttp.StatusOK || json.Unmarshal(r.body, &uv) != nil {
			t.Fatalf("GET %s: %d %s", uri, r.status, r.body)
		}
		return r, uv
	}

	_, uv := get(p.addrA, "/upstreams")
	if uv.Node != "a" || len(uv.Peers) != 1 || uv.Peers[0].Node != "b" || uv.Peers[0].Error != "" ||
		len(uv.Peers[0].Upstreams) != 1 || uv.Peers[0].Upstreams[0].Name != "openai" {
		t.Errorf("a's /upstreams: node %q, peers %+v; want b's own view under peers", uv.Node, uv.Peers)
	}
	if _, local := get(p.addrA, "/upstreams?local=1"); len(local.Peers) != 0 {
		t.Errorf("?local=1: peers %+v, want none", local.Peers)
	}

	// b gone: listed with why, within the view timeout.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	_ = ln.Close()
	p.a.SetView(View{Ring: p.ring, Members: []Member{{Name: "a", Addr: p.addrA, State: "active"}, {Name: "b", Addr: gone, State: "active"}}})
	r, uv := get(p.addrA, "/upstreams")
	if len(uv.Peers) != 1 || uv.Peers[0].Error == "" || uv.Peers[0].Upstreams != nil || r.took > 3*admin.OwnerViewTimeout {
		t.Errorf("b unreachable: peers %+v after %s; want b listed with its error", uv.Peers, r.took)
	}

	// A peer's question is taken on its signature alone.
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI("/upstreams?local=1")
	req.Header.Set(hopHeader, "a")
	if r := viewDo(t, p.addrB, req); r.status != fasthttp.StatusUnauthorized {
		t.Errorf("an unsigned peer question: %d %s, want 401", r.status, r.body)
	}
}
