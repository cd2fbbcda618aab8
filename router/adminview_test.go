package router

import (
	"encoding/json"
	"net/http"
	"testing"
)

// TestTenantViewFromOwner: a node that does not own a tenant answers
// GET /tenants/{name} with its owner's view, asked with the cluster secret;
// ?local=1, a peer's forged question, and an owner that cannot be asked each
// get what they should.
func TestTenantViewFromOwner(t *testing.T) {
	p := newHRPair(t) // a is an edge, b owns p.tenant
	for i := range 3 {
		if r := p.post(t, p.addrB); r.status != http.StatusOK {
			t.Fatalf("request %d to the owner: %+v", i, r)
		}
	}
	type view struct {
		Owner      string                `json:"owner"`
		Node       string                `json:"node"`
		OwnerError string                `json:"owner_error"`
		Requests   struct{ Used int64 }  `json:"requests"`
		Error      struct{ Code string } `json:"error"`
	}
	get := func(addr, path string, hdr map[string]string) (int, view) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := p.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v view
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return resp.StatusCode, v
	}
	path := "/tenants/" + p.tenant
	forged := map[string]string{hopHeader: "a,b,1,1700000000000,000000000000000000000000", sigHeader: "00"}
	for _, tc := range []struct {
		name       string
		addr, path string
		hdr        map[string]string
		status     int
		node       string
		used       int64
		code       string
	}{
		{"the owner", p.addrB, path, nil, http.StatusOK, "b", 3, ""},
		{"an edge: the owner's view", p.addrA, path, nil, http.StatusOK, "b", 3, ""},
		{"an edge, ?local=1: its own", p.addrA, path + "?local=1", nil, http.StatusOK, "a", 0, ""},
		{"a forged peer question", p.addrB, path, forged, http.StatusUnauthorized, "", 0, "invalid_peer_signature"},
		{"a peer header on another admin path", p.addrB, "/cluster", forged, http.StatusOK, "", 0, ""},
	} {
		status, v := get(tc.addr, tc.path, tc.hdr)
		if status != tc.status || v.Node != tc.node || v.Requests.Used != tc.used || v.Error.Code != tc.code || v.OwnerError != "" {
			t.Errorf("%s: %d %+v, want %d from node %q with %d requests, error %q", tc.name, status, v, tc.status, tc.node, tc.used, tc.code)
		}
	}

	// The owner at an address nothing listens on: the edge's own view,
	// and why.
	v := *p.a.view.Load()
	bad := View{Ring: v.Ring(), Members: []Member{{Name: "a", Addr: p.addrA, State: "active"}, {Name: "b", Addr: "127.0.0.1:1", State: "active"}}}
	p.a.SetView(bad)
	status, got := get(p.addrA, path, nil)
	if status != http.StatusOK || got.Owner != "b" || got.Node != "a" || got.OwnerError == "" {
		t.Fatalf("owner unreachable: %d %+v, want the edge's own view with owner_error", status, got)
	}
	t.Logf("owner unreachable: %q", got.OwnerError)
}
