package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringgate/ringgate/internal/redistest"
)

// failBound is the generous bound asserted on a failing call (its budget is
// 15 ms plus the pipeline allowance); the measured time is logged.
const failBound = time.Second

// countingHook counts what goes to Redis; a new connection's handshake
// (HELLO) is not counted.
type countingHook struct{ process, pipelines, dials atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.dials.Add(1)
		return next(ctx, network, addr)
	}
}

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "hello" {
			h.process.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipelines.Add(1)
		return next(ctx, cmds)
	}
}

// newStore is a store with a 1 s budget per call: for the tests of what it
// writes and reads, which a 15 ms budget (the default) would make fail on
// a busy CI machine (a save timed out there under -race). The tests of
// failures use newDefaultStore, with the budget production runs.
func newStore(tb testing.TB, addr string) *Store {
	tb.Helper()
	return newStoreWith(tb, addr, time.Second)
}

// newDefaultStore is a store with the default budget per call.
func newDefaultStore(tb testing.TB, addr string) *Store {
	tb.Helper()
	return newStoreWith(tb, addr, 0)
}

func newStoreWith(tb testing.TB, addr string, timeout time.Duration) *Store {
	tb.Helper()
	st, err := NewStore(StoreConfig{Addrs: []string{addr}, Timeout: timeout, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// rawClient talks to Redis directly, with ordinary timeouts, to check what
// the store wrote and to plant values.
func rawClient(tb testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	tb.Cleanup(func() { c.Close() })
	return c
}

func snaps(n int, rng *rand.Rand) []*Snapshot {
	out := make([]*Snapshot, n)
	for i := range out {
		out[i] = typicalSnapshot(fmt.Sprintf("tenant-%05d", i), 100, rng)
	}
	return out
}

func TestStoreRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, srv.Addr())
	ctx := context.Background()
	in := snaps(3, rand.New(rand.NewPCG(1, 1)))
	in[1].Final = true
	if err := st.SaveBatch(ctx, in, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, want := range in {
		got, err := st.Load(ctx, want.Tenant)
		if err != nil {
			t.Fatal(err)
		}
		if got == nil || !equal(got, want) {
			t.Fatalf("Load(%s) = %+v, want %+v", want.Tenant, got, want)
		}
	}
	// Overwrite: the newest save wins.
	in[0].Writer = "gw-9"
	if err := st.SaveBatch(ctx, in[:1], time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Load(ctx, in[0].Tenant); err != nil || got.Writer != "gw-9" {
		t.Fatalf("after overwrite: %+v, %v", got, err)
	}
	if got, want := st.Stats(), (Stats{Saved: 4, SaveBatches: 2, Loaded: 4}); got != want {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
	if !st.Available() {
		t.Fatal("not available")
	}
	if err := st.SaveBatch(ctx, nil, time.Minute); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
}

func TestSaveBatchOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	// A test of round trips, not of the budget (-race on 2 busy cores is
	// slow): the socket deadlines too, not only the call's context.
	st, err := NewStore(StoreConfig{Addrs: []string{srv.Addr()}, Timeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &countingHook{}
	st.client.AddHook(h)
	in := snaps(1000, rand.New(rand.NewPCG(2, 2)))
	start := time.Now()
	if err := st.SaveBatch(context.Background(), in, time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("1000 snapshots saved in %v", time.Since(start))
	if p, c := h.pipelines.Load(), h.process.Load(); p != 1 || c != 0 {
		t.Fatalf("%d pipelines and %d single commands for one batch, want 1 and 0", p, c)
	}
	raw := rawClient(t, srv.Addr())
	if n, err := raw.DBSize(context.Background()).Result(); err != nil || n != 1000 {
		t.Fatalf("DBSIZE = %d, %v; want 1000", n, err)
	}
	if s := st.Stats(); s.Saved != 1000 || s.SaveBatches != 1 {
		t.Fatalf("stats %+v", s)
	}
	got, err := st.Load(context.Background(), in[777].Tenant)
	if err != nil || got == nil || !equal(got, in[777]) {
		t.Fatalf("Load after batch: %v", err)
	}
}

func TestSaveBatchKeyAndTTL(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, srv.Addr())
	raw := rawClient(t, srv.Addr())
	ctx := context.Background()
	in := snaps(1, rand.New(rand.NewPCG(3, 3)))
	const ttl = 1500 * time.Millisecond
	if err := st.SaveBatch(ctx, in, ttl); err != nil {
		t.Fatal(err)
	}
	key := "ringgate:snap:{tenant-00000}"
	if st.Key("tenant-00000") != key {
		t.Fatalf("key %q", st.Key("tenant-00000"))
	}
	pttl, err := raw.PTTL(ctx, key).Result()
	if err != nil || pttl <= 0 || pttl > ttl {
		t.Fatalf("PTTL = %v, %v; want in (0, %v]", pttl, err, ttl)
	}
	if err := st.SaveBatch(ctx, in, 0); err == nil {
		t.Fatal("a save without TTL succeeded")
	}
}

func TestLoadAbsent(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, srv.Addr())
	got, err := st.Load(context.Background(), "nobody")
	if got != nil || err != nil {
		t.Fatalf("Load of an absent tenant = %v, %v; want nil, nil", got, err)
	}
	if s := st.Stats(); s.LoadMisses != 1 || s.LoadFailures != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestLoadBadValues(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, srv.Addr())
	raw := rawClient(t, srv.Addr())
	ctx := context.Background()
	other := Encode(nil, &Snapshot{Tenant: "other"})
	future := Encode(nil, &Snapshot{Tenant: "v9"})
	future[3] = 9
	plant := map[string][]byte{
		"garbage":   []byte("\x00\xffnot a snapshot at all"),
		"empty":     {},
		"truncated": Encode(nil, typicalSnapshot("truncated", 100, rand.New(rand.NewPCG(4, 4))))[:100],
		"v9":        future,
		"impostor":  other, // another tenant's snapshot under this key
	}
	for tenant, v := range plant {
		if err := raw.Set(ctx, st.Key(tenant), v, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for tenant := range plant {
		got, err := st.Load(ctx, tenant)
		want := ErrFormat
		if tenant == "v9" {
			want = ErrVersion
		}
		if got != nil || !errors.Is(err, want) {
			t.Errorf("Load(%s) = %v, %v; want nil, %v", tenant, got, err, want)
		}
	}
	if s := st.Stats(); s.DecodeErrors != uint64(len(plant)) || s.LoadFailures != 0 || s.BreakerOpens != 0 {
		t.Fatalf("stats %+v", s)
	}

	// A key of another type gets a reply error: Redis answered, so the
	// breaker stays closed.
	if err := raw.RPush(ctx, st.Key("list"), "x").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Load(ctx, "list"); err == nil {
		t.Fatal("Load of a list succeeded")
	}
	if !st.Available() {
		t.Fatal("a reply error opened the breaker")
	}
}

func TestSaveBatchInvalid(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, srv.Addr())
	ctx := context.Background()
	in := snaps(2, rand.New(rand.NewPCG(5, 5)))
	in = append(in, &Snapshot{Tenant: ""})
	err := st.SaveBatch(ctx, in, time.Minute)
	if !errors.Is(err, ErrFormat) {
		t.Fatalf("SaveBatch with an invalid snapshot: %v", err)
	}
	for _, s := range in[:2] {
		if got, err := st.Load(ctx, s.Tenant); err != nil || got == nil {
			t.Fatalf("valid snapshot %s not saved: %v", s.Tenant, err)
		}
	}
	if err := st.SaveBatch(ctx, in[2:], time.Minute); !errors.Is(err, ErrFormat) {
		t.Fatalf("SaveBatch of only invalid snapshots: %v", err)
	}
}

// timed runs f and returns how long it took.
func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

func TestRedisStopped(t *testing.T) {
	srv := redistest.Start(t)
	st := newDefaultStore(t, srv.Addr())
	ctx := context.Background()
	in := snaps(100, rand.New(rand.NewPCG(6, 6)))
	if err := st.SaveBatch(ctx, in, time.Minute); err != nil {
		t.Fatal(err)
	}
	srv.Stop()

	var err error
	d := timed(func() { err = st.SaveBatch(ctx, in, time.Minute) })
	t.Logf("SaveBatch(100) with Redis stopped: %v after %v", err, d)
	if err == nil || errors.Is(err, ErrUnavailable) || d > failBound {
		t.Fatalf("SaveBatch with Redis stopped: %v after %v", err, d)
	}
	if st.Available() {
		t.Fatal("available after a failure")
	}
	// The breaker is open: calls fail fast without touching the network
	// (ErrUnavailable says so; the time is bounded only against a hang).
	d = timed(func() { err = st.SaveBatch(ctx, in, time.Minute) })
	if !errors.Is(err, ErrUnavailable) || d > failBound {
		t.Fatalf("SaveBatch with the breaker open: %v after %v", err, d)
	}
	var got *Snapshot
	d = timed(func() { got, err = st.Load(ctx, in[0].Tenant) })
	if got != nil || !errors.Is(err, ErrUnavailable) || d > failBound {
		t.Fatalf("Load with the breaker open: %v, %v after %v", got, err, d)
	}
	s := st.Stats()
	if s.SaveFailures != 1 || s.Skipped != 2 || s.BreakerOpens != 1 {
		t.Fatalf("stats %+v", s)
	}

	// After the window one probe goes out, fails, and opens it again.
	time.Sleep(breakerWindow + 20*time.Millisecond)
	if !st.Available() {
		t.Fatal("not available for a probe after the breaker window")
	}
	d = timed(func() { got, err = st.Load(ctx, in[0].Tenant) })
	t.Logf("Load with Redis stopped: %v after %v", err, d)
	if got != nil || err == nil || errors.Is(err, ErrUnavailable) || d > failBound {
		t.Fatalf("probe Load: %v, %v after %v", got, err, d)
	}
	if _, err := st.Load(ctx, in[0].Tenant); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("after a failed probe: %v", err)
	}
}

func TestRedisPaused(t *testing.T) {
	srv := redistest.Start(t)
	st := newDefaultStore(t, srv.Addr())
	ctx := context.Background()
	in := snaps(1000, rand.New(rand.NewPCG(7, 7)))
	// Setup, not the budget under test: in batches small enough for the
	// 15 ms socket deadlines even under -race on two busy cores.
	setup, err := NewStore(StoreConfig{Addrs: []string{srv.Addr()}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(in); i += 50 {
		if err := setup.SaveBatch(ctx, in[i:i+50], time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	_ = setup.Close()
	srv.Pause(0)
	err = nil
	d := timed(func() { err = st.SaveBatch(ctx, in, time.Minute) })
	t.Logf("SaveBatch(1000) with Redis paused: %v after %v (budget %v)", err, d, DefaultTimeout+1000*perItem)
	if err == nil || d > failBound {
		t.Fatalf("SaveBatch with Redis paused: %v after %v", err, d)
	}
	time.Sleep(breakerWindow + 20*time.Millisecond)
	var got *Snapshot
	d = timed(func() { got, err = st.Load(ctx, in[0].Tenant) })
	t.Logf("Load with Redis paused: %v after %v (budget %v)", err, d, DefaultTimeout)
	if got != nil || err == nil || d > failBound {
		t.Fatalf("Load with Redis paused: %v, %v after %v", got, err, d)
	}
	// A call with its own shorter deadline stops at it.
	time.Sleep(breakerWindow + 20*time.Millisecond)
	short, cancel := context.WithTimeout(ctx, 2*time.Millisecond)
	defer cancel()
	d = timed(func() { _, err = st.Load(short, in[0].Tenant) })
	t.Logf("Load with a 2 ms deadline, Redis paused: %v after %v", err, d)
	if err == nil || d > failBound {
		t.Fatalf("Load with a short deadline: %v after %v", err, d)
	}

	srv.Resume()
	waitRecovered(t, st, in[:10])
	got, err = st.Load(ctx, in[0].Tenant)
	if err != nil || got == nil || !equal(got, in[0]) {
		t.Fatalf("Load after resume: %v, %v", got, err)
	}
}

func TestRedisRestarted(t *testing.T) {
	srv := redistest.Start(t)
	st := newDefaultStore(t, srv.Addr())
	ctx := context.Background()
	in := snaps(10, rand.New(rand.NewPCG(8, 8)))
	if err := st.SaveBatch(ctx, in, time.Minute); err != nil {
		t.Fatal(err)
	}
	srv.Restart() // empty: no persistence
	waitRecovered(t, st, in)
	got, err := st.Load(ctx, in[3].Tenant)
	if err != nil || got == nil || !equal(got, in[3]) {
		t.Fatalf("Load after restart: %v, %v", got, err)
	}

	// Down long enough for calls to fail and open the breaker.
	srv.Stop()
	if err := st.SaveBatch(ctx, in, time.Minute); err == nil {
		t.Fatal("SaveBatch with Redis stopped succeeded")
	}
	if _, err := st.Load(ctx, in[3].Tenant); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Load with the breaker open: %v", err)
	}
	srv.Restart()
	waitRecovered(t, st, in)
	got, err = st.Load(ctx, in[3].Tenant)
	if err != nil || got == nil || !equal(got, in[3]) {
		t.Fatalf("Load after restart: %v, %v", got, err)
	}
	if !st.Available() {
		t.Fatal("not available after recovery")
	}
}

// waitRecovered saves until it succeeds, at most 10 s.
func waitRecovered(t *testing.T, st *Store, in []*Snapshot) {
	t.Helper()
	start := time.Now()
	var err error
	for time.Since(start) < 10*time.Second {
		if err = st.SaveBatch(context.Background(), in, time.Minute); err == nil {
			t.Logf("recovered after %v (%+v)", time.Since(start), st.Stats())
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("not recovered after %v: %v", time.Since(start), err)
}

// TestCallerCancelKeepsBreakerClosed: a call the caller cancelled says
// nothing about Redis.
func TestCallerCancelKeepsBreakerClosed(t *testing.T) {
	srv := redistest.Start(t)
	st := newDefaultStore(t, srv.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := st.Load(ctx, "x"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Load with a cancelled context: %v", err)
	}
	if !st.Available() || st.Stats().BreakerOpens != 0 {
		t.Fatal("a cancelled call opened the breaker")
	}
}

func TestClose(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, srv.Addr())
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := st.Load(context.Background(), "x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Load after Close: %v", err)
	}
	if err := st.SaveBatch(context.Background(), snaps(1, rand.New(rand.NewPCG(9, 9))), time.Minute); !errors.Is(err, ErrClosed) {
		t.Fatalf("SaveBatch after Close: %v", err)
	}
	if st.Available() {
		t.Fatal("available after Close")
	}
}

func TestNewStoreConfig(t *testing.T) {
	if _, err := NewStore(StoreConfig{}); err == nil {
		t.Fatal("NewStore without an address succeeded")
	}
	if _, err := NewStore(StoreConfig{Addrs: []string{"127.0.0.1:1"}, Timeout: -time.Second}); err == nil {
		t.Fatal("NewStore with a negative timeout succeeded")
	}
	st, err := NewStore(StoreConfig{Addrs: []string{"127.0.0.1:1"}, Prefix: "p"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.conn.Timeout() != DefaultTimeout || st.Key("a") != "p:snap:{a}" {
		t.Fatalf("timeout %v, key %q", st.conn.Timeout(), st.Key("a"))
	}
}

// TestMain silences go-redis's own logger (it prints every failed dial to
// stderr, which the failure tests provoke on purpose).
func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	os.Exit(m.Run())
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func benchmarkSaveBatch(b *testing.B, n int) {
	srv := redistest.Start(b)
	// A batch of 1000 takes longer than the 15 ms budget on a loaded
	// machine; the benchmark measures speed, not the budget.
	st, err := NewStore(StoreConfig{Addrs: []string{srv.Addr()}, Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	in := snaps(n, rand.New(rand.NewPCG(10, 10)))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := st.SaveBatch(ctx, in, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/tenant")
}

func BenchmarkSaveBatch(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) { benchmarkSaveBatch(b, n) })
	}
}

func TestLoadManyOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, srv.Addr())
	ctx := context.Background()
	in := snaps(3, rand.New(rand.NewPCG(2, 2)))
	if err := st.SaveBatch(ctx, in, time.Minute); err != nil {
		t.Fatal(err)
	}
	names := []string{in[0].Tenant, "absent", in[2].Tenant, in[1].Tenant}
	got, err := st.LoadMany(ctx, names)
	if err != nil {
		t.Fatal(err)
	}
	want := []*Snapshot{in[0], nil, in[2], in[1]}
	for i := range want {
		if (got[i] == nil) != (want[i] == nil) || got[i] != nil && !equal(got[i], want[i]) {
			t.Fatalf("LoadMany[%d] (%s) = %+v, want %+v", i, names[i], got[i], want[i])
		}
	}
	srv.Stop()
	if _, err := st.LoadMany(ctx, names); err == nil {
		t.Fatal("LoadMany with Redis stopped: no error")
	}
}
