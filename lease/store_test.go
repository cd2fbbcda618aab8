package lease

import (
	"context"
	"testing"
	"time"

	"github.com/ringgate/ringgate/internal/redistest"
	"github.com/ringgate/ringgate/redisconn"
)

// stores gives each test the in-memory twin and the Redis store on a real
// redis-server, to check they keep the same window.
func stores(t *testing.T) map[string]Store {
	t.Helper()
	srv := redistest.Start(t)
	conn, err := redisconn.New(redisconn.Config{Addrs: []string{srv.Addr()}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	rs := NewRedisStore(conn, "t")
	if err := rs.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return map[string]Store{"inmem": NewInmemStore(), "redis": rs}
}

func TestStoreWindow(t *testing.T) {
	ctx := context.Background()
	lim := Amount{Requests: 100, Tokens: 1000}
	const ttl = time.Minute
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			steps := []struct {
				what        string
				now, exp    int64
				want, grant Amount
				ret         *ReturnRequest
			}{
				{what: "first block", now: 1000, exp: 1008, want: Amount{60, 300}, grant: Amount{60, 300}},
				{what: "what is left", now: 1001, exp: 1009, want: Amount{60, 800}, grant: Amount{40, 700}},
				{what: "nothing left", now: 1002, exp: 1010, want: Amount{1, 1}, grant: Amount{0, 0}},
				// The first block comes back: 10 requests and 50 tokens used
				// in bucket 1003, the rest freed.
				{what: "return", now: 1004, ret: &ReturnRequest{Now: 1004, Expires: 1008, Granted: Amount{60, 300}, Used: []Use{{Bucket: 1003, Amount: Amount{10, 50}}}}},
				{what: "room after the return", now: 1004, exp: 1012, want: Amount{100, 1000}, grant: Amount{50, 250}},
				// A bucket counts for Span+1 buckets: 1003 leaves at
				// 1003+Span+1; the block charged at 1009 at 1009+Span+1.
				{what: "still full", now: 1003 + Span, exp: 1011 + Span, want: Amount{100, 1000}, grant: Amount{0, 0}},
				{what: "1003 left", now: 1004 + Span, exp: 1012 + Span, want: Amount{100, 1000}, grant: Amount{10, 50}},
				{what: "1009 not yet", now: 1009 + Span, exp: 1017 + Span, want: Amount{100, 1000}, grant: Amount{0, 0}},
				{what: "1009 left", now: 1010 + Span, exp: 1018 + Span, want: Amount{100, 1000}, grant: Amount{40, 700}},
				// Long idle: everything has left.
				{what: "after idle", now: 5000, exp: 5008, want: Amount{100, 1000}, grant: Amount{100, 1000}},
			}
			var gen int64 // the window's, from the first grant
			for _, s := range steps {
				if s.ret != nil {
					r := *s.ret
					r.KeyTTL, r.Gen = ttl, gen
					if _, err := st.Return(ctx, "k", r); err != nil {
						t.Fatalf("%s: %v", s.what, err)
					}
					continue
				}
				got, err := st.Grant(ctx, "k", GrantRequest{Now: s.now, Expires: s.exp, Limit: lim, Want: s.want, KeyTTL: ttl})
				if err != nil {
					t.Fatalf("%s: %v", s.what, err)
				}
				if gen == 0 {
					gen = got.Gen
				}
				if got.Granted != s.grant {
					t.Fatalf("%s: granted %+v, want %+v (window %+v, oldest %d)", s.what, got.Granted, s.grant, got.Used, got.Oldest)
				}
			}
		})
	}
}

func TestStoreSlots(t *testing.T) {
	ctx := context.Background()
	ms := int64(time.Millisecond)
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			steps := []struct {
				node       string
				want, now  int64
				held       int64
				ttl        time.Duration
				explaining string
			}{
				{"a", 3, 1000 * ms, 3, time.Second, "a takes 3 of 4"},
				{"b", 3, 1001 * ms, 1, time.Second, "b gets what is left"},
				{"a", 1, 1002 * ms, 1, time.Second, "a shrinks"},
				{"b", 3, 1003 * ms, 3, time.Second, "b grows into it"},
				{"c", 4, 2002 * ms, 1, time.Second, "a lapsed (1002+1000), b still holds 3"},
				{"c", 4, 2004 * ms, 4, time.Second, "b lapsed too"},
			}
			for _, s := range steps {
				held, err := st.HoldSlots(ctx, "k", s.node, s.want, 4, s.now, s.ttl)
				if err != nil {
					t.Fatal(err)
				}
				if held != s.held {
					t.Fatalf("%s: held %d, want %d", s.explaining, held, s.held)
				}
			}
		})
	}
}
