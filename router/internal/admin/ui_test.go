package admin

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ringgate/ringgate/router/internal/hopsign"
	"github.com/ringgate/ringgate/router/internal/status"
)

// fakeTenants is how many tenants the fake node owns: more than /ui/state
// lists.
const fakeTenants = 5000

// UINode is the fake node's part: tenants a0000…, the higher the number
// the busier.
func (f *fakeNode) UINode(owns func(string) bool, filter string, limit int) status.UINode {
	out := status.UINode{Node: "a", Upstreams: f.Upstreams().Upstreams}
	for i := fakeTenants - 1; i >= 0; i-- {
		name := fmt.Sprintf("a%04d", i)
		if !strings.Contains(name, filter) || !owns(name) {
			continue
		}
		u := status.Usage{Requests: status.Dimension{Used: int64(i), Limit: 10 * fakeTenants}}
		out.Totals.Add(u, 0)
		if out.Matched++; len(out.Tenants) < limit {
			out.Tenants = append(out.Tenants, status.Tenant{Name: name, Owner: "a", Requests: u.Requests})
		}
	}
	return out
}

// uiState is /ui/state as the page reads it.
type uiState struct {
	Cluster struct {
		Self    string `json:"self"`
		Members []any  `json:"members"`
	} `json:"cluster"`
	Tenants []struct {
		Name     string `json:"name"`
		Owner    string `json:"owner"`
		Requests struct{ Used, Limit int64 }
	} `json:"tenants"`
	Matched *int `json:"tenants_matched"`
	LeftOut *int `json:"tenants_left_out"`
	Totals  *struct {
		Requests int64 `json:"requests"`
	} `json:"totals"`
	Nodes []struct {
		Node      string `json:"node"`
		Error     string `json:"error"`
		Upstreams []any  `json:"upstreams"`
		Tenants   []any  `json:"tenants"`
	} `json:"nodes"`
}

// /ui/state merges the members' parts: the busiest tenants of all of
// them first, at most UITenants, with how many were left out and the
// totals; each member's leases, or why it did not answer.
func TestUIStateMergesTheMembersBounded(t *testing.T) {
	f := &fakeNode{members: []string{"a", "b", "c"}, signed: true, answers: map[string]string{
		"b": `{"node":"b","upstreams":[{"name":"openai","kind":"openai"}],"matched":2,"totals":{"requests":99999},` +
			`"tenants":[{"name":"b-hot","owner":"b","requests":{"used":50000,"limit":50000}},{"name":"b-cold","owner":"b"}]}`}}
	h := newHandler(f, "")
	code, body, _ := do(h, "GET", "/ui/state", "127.0.0.1")
	var s uiState
	if code != 200 || json.Unmarshal([]byte(body), &s) != nil {
		t.Fatalf("GET /ui/state: %d %.300s", code, body)
	}
	if s.Cluster.Self != "a" || s.Matched == nil || s.LeftOut == nil || s.Totals == nil {
		t.Fatalf("missing fields: %.300s", body)
	}
	if len(s.Tenants) != UITenants || *s.Matched != fakeTenants+2 || *s.LeftOut != fakeTenants+2-UITenants {
		t.Fatalf("%d tenants, %d matched, %d left out", len(s.Tenants), *s.Matched, *s.LeftOut)
	}
	if s.Tenants[0].Name != "b-hot" || s.Tenants[0].Owner != "b" || s.Tenants[1].Name != "a4999" {
		t.Fatalf("not busiest first: %+v", s.Tenants[:2])
	}
	if want := int64(fakeTenants*(fakeTenants-1)/2 + 99999); s.Totals.Requests != want {
		t.Fatalf("totals %d, want %d", s.Totals.Requests, want)
	}
	if len(s.Nodes) != 3 || s.Nodes[1].Node != "b" || len(s.Nodes[1].Upstreams) != 1 || s.Nodes[1].Tenants != nil ||
		s.Nodes[2].Node != "c" || s.Nodes[2].Error == "" {
		t.Fatalf("nodes: %+v", s.Nodes)
	}
	if len(body) > 100_000 {
		t.Fatalf("%d bytes for %d tenants", len(body), UITenants)
	}
	if !slices.Contains(f.asked, "b /ui/state?local=1&limit=300&filter=") {
		t.Fatalf("asked %v", f.asked)
	}
	code, body, _ = do(h, "GET", "/ui/state?limit=5&filter=a12", "127.0.0.1")
	if json.Unmarshal([]byte(body), &s) != nil || code != 200 || len(s.Tenants) != 5 || s.Tenants[0].Name != "b-hot" || s.Tenants[1].Name != "a1299" {
		t.Fatalf("limit and filter: %d %.300s", code, body)
	}
	// Mid ring change b claims a4999 too (its ring moved it, this node's
	// did not): shown once, as this node's ring names its owner, and
	// counted once.
	f.answers["b"] = `{"node":"b","matched":1,"totals":{"requests":7},"tenants":[{"name":"a4999","owner":"b","requests":{"used":7,"limit":50000}}]}`
	code, body, _ = do(h, "GET", "/ui/state", "127.0.0.1")
	if json.Unmarshal([]byte(body), &s) != nil || code != 200 || *s.Matched != fakeTenants ||
		s.Totals.Requests != int64(fakeTenants*(fakeTenants-1)/2) {
		t.Fatalf("a tenant two members claim: %d matched, totals %d: %.300s", *s.Matched, s.Totals.Requests, body)
	}
	if tn := s.Tenants[0]; tn.Name != "a4999" || tn.Owner != "a" || tn.Requests.Used != 4999 {
		t.Fatalf("a4999 shown as %+v, want a's", tn)
	}
}

// A member asking, with the cluster's signature, gets this node's own part
// and nobody else is asked; a bad limit or filter is a 400.
func TestUIStateLocalAndBadInput(t *testing.T) {
	f := &fakeNode{members: []string{"a", "b"}, signed: true, answers: map[string]string{}}
	h := newHandler(f, "secret")
	code, body, _ := do(h, "GET", "/ui/state?local=1&limit=2", "10.0.0.9", hopsign.HopHeader, "b")
	var p status.UINode
	if code != 200 || json.Unmarshal([]byte(body), &p) != nil || p.Node != "a" || len(p.Tenants) != 2 || p.Matched != fakeTenants || len(f.asked) != 0 {
		t.Fatalf("a member's question: %d %.300s, asked %v", code, body, f.asked)
	}
	for _, uri := range []string{"/ui/state?limit=-1", "/ui/state?limit=x", "/ui/state?limit=100000", "/ui/state?filter=" + strings.Repeat("x", 300)} {
		code, body, _ := do(h, "GET", uri, "10.0.0.9", "Authorization", "Bearer secret")
		if c := errorCode(t, body); code != 400 || (c != "invalid_limit" && c != "invalid_filter") {
			t.Fatalf("%s: %d %s", uri[:min(len(uri), 40)], code, body)
		}
	}
}

// /ui/state needs the admin token (or, without one, a loopback caller);
// the page's files hold no data and need no token, but without one
// configured only a loopback caller gets them, as every admin path.
func TestUIAuth(t *testing.T) {
	f := &fakeNode{}
	h := newHandler(f, "")
	for _, p := range []string{"/ui/state", "/ui"} {
		if code, body, _ := do(h, "GET", p, "10.0.0.9"); code != 401 || errorCode(t, body) != "invalid_admin_token" {
			t.Fatalf("%s, no token configured, a remote caller: %d %s", p, code, body)
		}
	}
	if code, _, _ := do(h, "GET", "/ui", "127.0.0.1"); code != 200 {
		t.Fatalf("/ui, no token configured, a loopback caller: %d", code)
	}
	h = newHandler(f, "secret")
	if code, body, _ := do(h, "GET", "/ui/state", "127.0.0.1"); code != 401 || errorCode(t, body) != "invalid_admin_token" {
		t.Fatalf("a token configured, none sent: %d %s", code, body)
	}
	if code, _, _ := do(h, "GET", "/ui/state", "10.0.0.9", "Authorization", "Bearer wrong"); code != 401 {
		t.Fatalf("a wrong token: %d", code)
	}
	if code, _, _ := do(h, "GET", "/ui/state", "10.0.0.9", "Authorization", "Bearer secret"); code != 200 {
		t.Fatalf("the token: %d", code)
	}
	for _, p := range []string{"/ui", "/ui/app.js", "/ui/ui.css"} {
		code, body, resp := do(h, "GET", p, "10.0.0.9")
		if code != 200 || len(body) == 0 || !strings.Contains(string(resp.Header.Peek("Content-Security-Policy")), "default-src 'self'") ||
			strings.Contains(body, "a4999") {
			t.Fatalf("%s: %d, CSP %q", p, code, resp.Header.Peek("Content-Security-Policy"))
		}
	}
	if code, _, _ := do(h, "POST", "/ui", "127.0.0.1", "Authorization", "Bearer secret"); code != 405 && code != 404 {
		t.Fatalf("POST /ui: %d", code)
	}
}
