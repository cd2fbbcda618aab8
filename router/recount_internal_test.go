package router

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
	"github.com/ringgate/ringgate/ring"
)

// A prompt that would be counted exactly (its bytes over the token limit)
// is not, when the tenant's requests refuse it anyway and it may not wait:
// a refusal charges nothing, and each such request cost the tokenizer's
// whole run over its text, 0.15–1.2 s of CPU for 1–8 MiB, again and again
// from a tenant over its rpm (found by a reviewer).
func TestRefusedRequestNotCounted(t *testing.T) {
	r, cfg := testRouter(t, Options{})
	_, addr := startFake(t, fakeupstream.Options{CompletionMin: 5, CompletionMax: 5})
	cfg.Upstreams[0].BaseURL = "http://" + addr
	cfg.Tenants = []config.Tenant{{Name: "cpu", Keys: []string{"k-cpu"}, RPM: 1, TPM: 10_000, Concurrency: 10}}
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	r.SetView(View{Ring: ring.New(1, []string{"t"}), Members: []Member{{Name: "t", Addr: "127.0.0.1:1", State: "active"}}})
	base := "http://" + serveRouter(t, r)
	post := func(content string) int {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"model": "gpt-4o", "max_tokens": 5,
			"messages": []map[string]string{{"role": "user", "content": content}}})
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer k-cpu")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := post("hi"); s != http.StatusOK {
		t.Fatalf("the one request of the window: %d", s)
	}
	big := strings.Repeat("a b c d ", 64<<10) // 512 KiB, over the tpm in bytes
	before := r.tokens.Tokenizer().CountedBytes()
	for range 3 {
		if s := post(big); s != http.StatusTooManyRequests {
			t.Fatalf("over rpm: %d", s)
		}
	}
	if n := r.tokens.Tokenizer().CountedBytes() - before; n > 4<<10 {
		t.Errorf("the tokenizer ran over %d bytes for 3 requests refused for rpm (the probes need %d)", n, 3*2*32)
	}
}
