package router

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/ring"
)

// A hop that waited in its tenant's line, once admitted, tells the edge
// what the tenant and its levels used (levelsUsedHeader), as a hop admitted
// at once does: the edge seeds its fallback shares from it. The queued
// path used to leave it out.
func TestQueuedHopSendsLevelsUsed(t *testing.T) {
	fake, upAddr := startFake(t, fakeupstream.Options{Latency: time.Second, CompletionMin: 5, CompletionMax: 5})

	cfg := config.Default()
	cfg.Node.Name = "t"
	cfg.Cluster.Secret = bytes.Repeat([]byte{7}, 32)
	cfg.Upstreams = []config.Upstream{{Name: "up", Kind: config.KindOpenAI, BaseURL: "http://" + upAddr, Models: []string{"gpt-4o"}}}
	cfg.Queue.InteractiveWait = 5 * time.Second
	cfg.Teams = []config.Team{{Name: "research", RPM: 1000}}
	cfg.Tenants = []config.Tenant{{Name: "acme", Keys: []string{"k"}, RPM: 100, TPM: 1 << 30, Concurrency: 1,
		Priority: config.PriorityInteractive, Team: "research"}}
	r, err := New(Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	rg := ring.New(1, []string{"t"})
	r.SetView(View{Ring: rg, Members: []Member{
		{Name: "p", Addr: deadAddr(t), State: "active"}, {Name: "t", Addr: "127.0.0.1:1", State: "active"}}})
	tn := r.state.Load().byName["acme"]

	url := "http://" + serveRouter(t, r) + "/v1/chat/completions"
	body := []byte(`{"model":"gpt-4o","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	if !poll(2*time.Second, func() bool { return tn.c().lim.Usage(r.clock()).InFlight == 1 }) {
		t.Fatal("the first call is not running")
	}

	hop := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(hop)
	hop.Header.SetMethod(fasthttp.MethodPost)
	hop.SetRequestURI(url)
	hop.Header.Set("Authorization", "Bearer k")
	hop.Header.SetContentType("application/json")
	hop.SetBody(body)
	r.hops.Sign(hop, "p", "t", rg.Version(), 1)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	done := make(chan error, 1)
	go func() { done <- fasthttp.DoTimeout(hop, resp, 10*time.Second) }()
	if !poll(2*time.Second, func() bool { return tn.c().queue.Waiting() == 1 }) {
		t.Fatal("the hop is not waiting in the tenant's line")
	}
	fake.SetOptions(fakeupstream.Options{CompletionMin: 5, CompletionMax: 5})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode() != fasthttp.StatusOK || len(resp.Header.Peek("x-ringgate-queued-ms")) == 0 {
		t.Fatalf("the hop: %d (queued %q) %s, want 200 after a wait", resp.StatusCode(), resp.Header.Peek("x-ringgate-queued-ms"), resp.Body())
	}
	used := string(resp.Header.Peek(levelsUsedHeader))
	if !strings.HasPrefix(used, "acme=2,") || !strings.Contains(used, ";team/research=2,") {
		t.Errorf("%s: %q, want the tenant's and the team's two requests", levelsUsedHeader, used)
	}
	if s := <-first; s != http.StatusOK {
		t.Errorf("the first call: %d, want 200", s)
	}
}
