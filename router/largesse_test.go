package router_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/fakeupstream"
)

// A stream read whole (no text/event-stream Content-Type) whose filtered
// events pass 256 KiB: reply.AnswerWriteDeadline swaps the body out, but the
// filtered body was set with SetBodyRaw, which SwapBody does not see.
func TestLargeSSEUnderTextPlainRelayed(t *testing.T) {
	const completion = 60_000
	text := fakeupstream.GeneratedText(completion)
	base := serveBytes(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for i := 0; i < len(text); i += 400 {
			piece, _ := json.Marshal(text[i:min(i+400, len(text))])
			fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%s}}]}\n\n", piece)
		}
		fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":30,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\ndata: [DONE]\n\n", completion, completion+30)
	})
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			e := newEnv(t, envConfig{
				tenants: []config.Tenant{tenantCfg("ctype", 1000, 10_000_000, 10)},
				openAI: func(u *config.Upstream) {
					u.BaseURL, u.Models = base, []string{"gpt-review"}
				},
			})
			r := e.post("/v1/chat/completions", keyOf("ctype"), chatBody("gpt-review", 70_000, stream, false), nil)
			t.Logf("status %d, %d bytes to the client (provider sent %d bytes of text in the stream)", r.status, len(r.body), len(text))
			if r.status != 200 || !bytes.Contains(r.body, []byte("data: [DONE]")) {
				t.Fatalf("client did not get the stream: %d bytes, status %d", len(r.body), r.status)
			}
		})
	}
}
