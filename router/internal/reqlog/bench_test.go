package reqlog

import (
	"io"
	"log/slog"
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkRequestWork is what this package adds to a request that is
// served with the access lines off: its id made and set on the answer,
// sent on to the provider, the access line looked for. The client's own
// id costs a header read instead of the making.
//
//	go test -run XXX -bench RequestWork ./router/internal/reqlog/
func BenchmarkRequestWork(b *testing.B) {
	n := New("node-1", slog.New(slog.NewJSONHandler(io.Discard, nil)), func() int64 { return 0 }, false)
	for _, id := range []string{"", "client-id-1"} {
		name := map[string]string{"": "made", "client-id-1": "client's"}[id]
		b.Run(name, func(b *testing.B) {
			var ctx fasthttp.RequestCtx
			ctx.Request.Header.Set("Authorization", "Bearer sk-1")
			ctx.Request.Header.SetContentType("application/json")
			if id != "" {
				ctx.Request.Header.Set(Header, id)
			}
			var up fasthttp.Request
			b.ReportAllocs()
			for b.Loop() {
				ctx.Response.Header.Reset()
				n.Begin(&ctx)
				a := Call(&ctx, "acme", "gpt-4o-mini")
				CopyID(&up.Header, &ctx.Response.Header)
				a.Settled(1, 1)
				n.Done(&ctx, false)
			}
		})
	}
}
