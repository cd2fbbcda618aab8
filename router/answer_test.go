package router_test

import (
	"net"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/config"
)

// TestJSONRequestStreamedAnswer: a provider that answers a JSON request with
// an SSE stream all the same. A JSON request's answer is read whole; the
// stream in it must still reach the client, and settle on its usage.
func TestJSONRequestStreamedAnswer(t *testing.T) {
	const stream = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n" +
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1,\"total_tokens\":10}}\n\n" +
		"data: [DONE]\n\n"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyString(stream)
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })

	e := newEnv(t, envConfig{
		tenants:       []config.Tenant{tenantCfg("acme", 100, 100000, 10)},
		openAIBaseURL: "http://" + ln.Addr().String(),
	})
	r := e.post("/v1/chat/completions", keyOf("acme"), chatBody(openAIModel, 50, false, false), nil)
	if body := string(r.body); r.status != 200 || !strings.Contains(body, `"content":"hi"`) || !strings.Contains(body, "data: [DONE]") {
		t.Fatalf("answer %v", r)
	}
	e.waitSettled("acme", 10) // the usage the stream reported
}
