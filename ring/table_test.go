package ring

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type change struct {
	from, to *Ring
}

// recorder collects onChange calls and checks they never overlap.
type recorder struct {
	mu      sync.Mutex
	changes []change
	active  atomic.Int32
	t       *testing.T
	notify  chan struct{}
}

func newRecorder(t *testing.T) *recorder {
	return &recorder{t: t, notify: make(chan struct{}, 100)}
}

func (r *recorder) onChange(from, to *Ring) {
	if r.active.Add(1) != 1 {
		r.t.Error("onChange called concurrently with itself")
	}
	defer r.active.Add(-1)
	r.mu.Lock()
	r.changes = append(r.changes, change{from, to})
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *recorder) snapshot() []change {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.changes)
}

// checkOrder: versions strictly increase by one and each from is the
// previous to.
func checkOrder(t *testing.T, cs []change) {
	t.Helper()
	var prev *Ring
	for i, c := range cs {
		if c.from == nil || c.to == nil {
			t.Fatalf("change %d: nil ring", i)
		}
		if c.to.Version() != c.from.Version()+1 {
			t.Fatalf("change %d: v%d → v%d", i, c.from.Version(), c.to.Version())
		}
		if prev != nil && c.from != prev {
			t.Fatalf("change %d: from v%d, previous to was v%d", i, c.from.Version(), prev.Version())
		}
		prev = c.to
	}
}

func TestTableStartsEmpty(t *testing.T) {
	tb := NewTable("gw-1", 0, nil)
	defer tb.Close()
	r := tb.Current()
	if r == nil || r.Version() != 0 || r.Len() != 0 {
		t.Fatalf("initial ring = %+v", r)
	}
	if _, ok := r.Owner("t"); ok {
		t.Fatal("initial ring has an owner")
	}
	if tb.debounce != DefaultDebounce || tb.Self() != "gw-1" {
		t.Fatalf("debounce %v self %q", tb.debounce, tb.Self())
	}
}

func TestTableBurstCoalesces(t *testing.T) {
	rec := newRecorder(t)
	const debounce = 100 * time.Millisecond
	tb := NewTable("gw-1", debounce, rec.onChange)
	defer tb.Close()

	burst := [][]string{
		{"gw-1"},
		{"gw-1", "gw-2"},
		{"gw-1", "gw-2", "gw-3"},
		{"gw-3", "gw-1"},
		{"gw-2", "gw-3", "gw-1", "gw-4"},
	}
	start := time.Now()
	for _, set := range burst {
		tb.Update(set)
	}
	if v := tb.Current().Version(); v != 0 {
		t.Fatalf("rebuilt before the debounce: v%d", v)
	}
	select {
	case <-rec.notify:
	case <-time.After(5 * time.Second):
		t.Fatal("no rebuild after the burst")
	}
	took := time.Since(start)
	if took < debounce {
		t.Fatalf("rebuild after %v, before the %v debounce", took, debounce)
	}
	// Nothing else may follow.
	time.Sleep(3 * debounce)
	cs := rec.snapshot()
	if len(cs) != 1 {
		t.Fatalf("%d rebuilds for one burst", len(cs))
	}
	checkOrder(t, cs)
	c := cs[0]
	want := []string{"gw-1", "gw-2", "gw-3", "gw-4"}
	if c.from.Version() != 0 || c.to.Version() != 1 || !slices.Equal(c.to.Members(), want) {
		t.Fatalf("change v%d→v%d %v", c.from.Version(), c.to.Version(), c.to.Members())
	}
	if tb.Current() != c.to {
		t.Fatal("Current is not the ring reported to onChange")
	}
	t.Logf("burst of %d updates → 1 rebuild after %v (debounce %v)", len(burst), took.Round(time.Millisecond), debounce)
}

func TestTableVersionsAndUnchanged(t *testing.T) {
	rec := newRecorder(t)
	tb := NewTable("gw-1", time.Hour, rec.onChange) // only Flush applies
	defer tb.Close()

	sets := [][]string{
		{"gw-1"},
		{"gw-1", "gw-2"},
		{"gw-2", "gw-1"}, // same set: no version
		{"gw-1", "gw-2", "gw-2", ""},
		{"gw-1", "gw-11"},
		{"gw-1"},
		{},
		nil, // same (empty) set
		{"gw-3"},
	}
	wantVersions := []uint64{1, 2, 2, 2, 3, 4, 5, 5, 6}
	for i, set := range sets {
		tb.Update(set)
		tb.Flush()
		if v := tb.Current().Version(); v != wantVersions[i] {
			t.Fatalf("after set %d %v: v%d, want v%d", i, set, v, wantVersions[i])
		}
	}
	cs := rec.snapshot()
	if len(cs) != 6 {
		t.Fatalf("%d changes, want 6", len(cs))
	}
	checkOrder(t, cs)

	// A→B→A within the debounce: no new version, no callback.
	tb.Update([]string{"gw-9"})
	tb.Update([]string{"gw-3"})
	tb.Flush()
	tb.Update(nil)
	tb.Update([]string{"gw-3"})
	tb.Flush()
	if v := tb.Current().Version(); v != 6 || len(rec.snapshot()) != 6 {
		t.Fatalf("flip-flop made v%d, %d changes", v, len(rec.snapshot()))
	}
	// Flush with nothing pending is a no-op.
	tb.Flush()
	if v := tb.Current().Version(); v != 6 {
		t.Fatalf("empty Flush made v%d", v)
	}
}

func TestTableUpdateCopiesInput(t *testing.T) {
	tb := NewTable("gw-1", time.Hour, nil)
	defer tb.Close()
	in := []string{"gw-1", "gw-2"}
	tb.Update(in)
	in[0], in[1] = "x", "y"
	tb.Flush()
	if got := tb.Current().Members(); !slices.Equal(got, []string{"gw-1", "gw-2"}) {
		t.Fatalf("members = %v", got)
	}
}

// A steady stream of events cannot postpone the rebuild forever.
func TestTableMaxWait(t *testing.T) {
	rec := newRecorder(t)
	const debounce = 40 * time.Millisecond
	tb := NewTable("gw-1", debounce, rec.onChange)
	defer tb.Close()
	stop := make(chan struct{})
	go func() {
		sets := [][]string{{"a"}, {"a", "b"}}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(debounce / 4):
				tb.Update(sets[i%2])
			}
		}
	}()
	defer close(stop)
	select {
	case <-rec.notify:
	case <-time.After(maxWaitFactor*debounce + 2*time.Second):
		t.Fatal("continuous updates starved the rebuild")
	}
}

// onChange may be slow; Update must not wait for it, and updates arriving
// meanwhile are coalesced into the next version.
func TestTableSlowCallbackDoesNotBlockUpdate(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan *Ring, 10)
	tb := NewTable("gw-1", time.Millisecond, func(from, to *Ring) {
		entered <- to
		<-release
	})
	defer tb.Close()
	tb.Update([]string{"a"})
	first := <-entered // worker is now stuck in onChange
	done := make(chan struct{})
	go func() {
		for i := range 100 {
			tb.Update(names("n-", i%7+2))
		}
		tb.Update([]string{"a", "b", "c"})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Update blocked behind onChange")
	}
	if first.Version() != 1 || tb.Current().Version() != 1 {
		t.Fatalf("versions %d / %d", first.Version(), tb.Current().Version())
	}
	close(release)
	second := <-entered
	if second.Version() != 2 || !slices.Equal(second.Members(), []string{"a", "b", "c"}) {
		t.Fatalf("second ring v%d %v", second.Version(), second.Members())
	}
}

func TestTableClose(t *testing.T) {
	var calls atomic.Int32
	tb := NewTable("gw-1", 20*time.Millisecond, func(from, to *Ring) { calls.Add(1) })
	tb.Update([]string{"a"})
	tb.Flush()
	tb.Update([]string{"a", "b"}) // pending when we close
	tb.Close()
	n := calls.Load()
	tb.Update([]string{"c"})
	tb.Flush() // must not hang
	time.Sleep(100 * time.Millisecond)
	tb.Close() // idempotent
	if got := calls.Load(); got != n || got != 1 {
		t.Fatalf("callbacks: %d at Close, %d later", n, got)
	}
	if r := tb.Current(); r.Version() != 1 || !slices.Equal(r.Members(), []string{"a"}) {
		t.Fatalf("Current after Close = v%d %v", r.Version(), r.Members())
	}
}

// Close waits for a callback in progress and none starts afterwards.
func TestTableCloseWaitsForCallback(t *testing.T) {
	entered := make(chan struct{})
	var inCallback atomic.Bool
	var calls atomic.Int32
	tb := NewTable("gw-1", time.Millisecond, func(from, to *Ring) {
		calls.Add(1)
		inCallback.Store(true)
		if calls.Load() == 1 {
			close(entered)
		}
		time.Sleep(50 * time.Millisecond)
		inCallback.Store(false)
	})
	tb.Update([]string{"a"})
	<-entered
	tb.Update([]string{"a", "b"})
	tb.Close()
	if inCallback.Load() {
		t.Fatal("Close returned while onChange was running")
	}
	n := calls.Load()
	time.Sleep(50 * time.Millisecond)
	if calls.Load() != n {
		t.Fatal("callback after Close returned")
	}
}

// Lock-free lookups race with rebuilds (run with -race).
func TestTableConcurrentOwner(t *testing.T) {
	rec := newRecorder(t)
	tb := NewTable("gw-1", time.Millisecond, rec.onChange)
	defer tb.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var lookups atomic.Int64
	for g := range 4 {
		wg.Go(func() {
			var lastV uint64
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := tb.Current()
				if r.Version() < lastV {
					t.Errorf("version went back: %d after %d", r.Version(), lastV)
					return
				}
				lastV = r.Version()
				o, ok := r.Owner(tenants10k[(i+g*997)%len(tenants10k)])
				if ok != (r.Len() > 0) || (ok && !r.Has(o)) {
					t.Errorf("v%d: owner %q, %v", r.Version(), o, ok)
					return
				}
				lookups.Add(1)
			}
		})
	}
	for i := range 200 {
		tb.Update(names("gw-", i%9)) // includes the empty set
		if i%3 == 0 {
			tb.Flush()
		} else if i%7 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	tb.Update(names("gw-", 5))
	tb.Flush()
	close(stop)
	wg.Wait()
	// Flush returned after the last onChange: the record is complete.
	cs := rec.snapshot()
	checkOrder(t, cs)
	if last := cs[len(cs)-1].to; last != tb.Current() || last.Len() != 5 {
		t.Fatalf("last change v%d, current v%d", last.Version(), tb.Current().Version())
	}
	t.Logf("%d rebuilds, %d concurrent lookups", len(cs), lookups.Load())
}
