package router

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/ring"
	"github.com/ringgate/ringgate/router/internal/hop"
)

// Two routers whose hops go over an in-memory network (Options.Dial): a
// client request at the edge is decided by the owner across it; with the
// link cut, the edge cannot reach the owner and serves the tenant on its
// own share; healed, the owner decides again.
func TestHopsOverInmemNetwork(t *testing.T) {
	_, upAddr := startFake(t, fakeupstream.Options{CompletionMin: 5, CompletionMax: 5})
	n := hop.NewInmem()
	rg := ring.New(1, []string{"o"})
	view := View{Ring: rg, Members: []Member{{Name: "e", Addr: "e", State: "active"}, {Name: "o", Addr: "o", State: "active"}}}
	now := newSetClock(time.Now().UnixNano()) // one clock: a cut's down mark lapses when the test says
	node := func(name string) *Router {
		cfg := config.Default()
		cfg.Node.Name = name
		cfg.Cluster.Secret = bytes.Repeat([]byte{7}, 32)
		cfg.Upstreams = []config.Upstream{{Name: "up", Kind: config.KindOpenAI, BaseURL: "http://" + upAddr, Models: []string{"gpt-4o"}}}
		cfg.Tenants = []config.Tenant{{Name: "acme", Keys: []string{"k"}, RPM: 600}}
		r, err := New(Options{Config: cfg, Dial: n.Dialer(name), Clock: now})
		if err != nil {
			t.Fatal(err)
		}
		r.SetView(view)
		srv := r.Server()
		ln := n.Listen(name)
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Shutdown() })
		return r
	}
	edge, owner := node("e"), node("o")
	url := "http://" + serveRouter(t, edge) + "/v1/chat/completions"
	body := []byte(`{"model":"gpt-4o","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	ask := func() (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("x-ringgate-node")
	}
	ownerCount := func() int64 { return owner.state.Load().ByName["acme"].Core().Lim.Usage(now.Load()).Requests }

	if s, by := ask(); s != http.StatusOK || by != "o" || ownerCount() != 1 {
		t.Fatalf("across the network: %d from %q, owner counts %d; want 200 decided by o", s, by, ownerCount())
	}
	n.Partition([]string{"e"}, []string{"o"})
	if s, by := ask(); s != http.StatusOK || by != "e" || ownerCount() != 1 {
		t.Fatalf("cut: %d from %q, owner counts %d; want 200 on the edge's share", s, by, ownerCount())
	}
	if !edge.peers.Down("o") {
		t.Fatal("the refused owner is not marked down")
	}
	n.Heal()
	now.Add(int64(hop.DownFor)) // the edge's down mark lapses
	if s, by := ask(); s != http.StatusOK || by != "o" || ownerCount() < 2 {
		t.Fatalf("healed: %d from %q, owner counts %d; want the owner deciding again", s, by, ownerCount())
	}
}
