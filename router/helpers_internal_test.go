package router

import (
	"net"
	"testing"

	"github.com/ringgate/ringgate/fakeupstream"
)

// Test machinery shared by this package's internal tests.

// serveRouter serves r's HTTP on a free loopback port until the test ends,
// and returns its address.
func serveRouter(t testing.TB, r *Router) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := r.Server()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return ln.Addr().String()
}

// startFake starts the fake provider with o on a free loopback port until
// the test ends, and returns it and its address.
func startFake(t testing.TB, o fakeupstream.Options) (*fakeupstream.Server, string) {
	t.Helper()
	fake := fakeupstream.New(o)
	addr, err := fake.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Close() })
	return fake, addr
}
