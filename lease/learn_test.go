package lease

import (
	"context"
	"testing"
	"time"

	"github.com/ringgate/ringgate/limiter"
)

// What the provider says is left is believed when it is less than the
// cluster's window leaves: the difference (someone else's use of the key)
// is charged to the store's window, and a lower limit it states is applied.
func TestObserveShrinksTheBudget(t *testing.T) {
	const window = 3 * time.Second
	ctx := context.Background()
	cases := []struct {
		name      string
		observed  Observed
		wantUsed  int64 // the store's window after the correction, at least
		wantLimit int64
	}{
		{"far from the limit: ignored", Observed{Limited: true, Remaining: 60, Reset: window}, 0, 100},
		{"others used the key", Observed{Limited: true, Remaining: 10, Reset: window}, 90, 100},
		{"a lower limit", Observed{Limited: true, Limit: 50, Remaining: 10, Reset: window}, 40, 50},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := NewInmemStore()
			now := int64(1000 * time.Hour)
			l := NewLeaser(LeaserConfig{Store: st, Node: "a", Clock: func() int64 { return now }})
			b := l.Budget(Config{Key: "k", Limits: limiter.Limits{Requests: 100}, Window: window}, nil)
			for range 10 { // demand, then a block
				b.Take(now, 1)
			}
			l.Maintain(ctx)
			base := b.Stats(now).Used.Requests
			b.Observe(now, c.observed, Observed{})
			now += int64(10 * time.Millisecond)
			l.Maintain(ctx)
			g, err := st.Grant(ctx, b.windowKey, GrantRequest{Now: now / (int64(window) / Span), Expires: now / (int64(window) / Span), Limit: Amount{Requests: 100}})
			if err != nil {
				t.Fatal(err)
			}
			s := b.Stats(now)
			t.Logf("window %d before, %d after; limit in force %d; corrections %d", base, g.Used.Requests, s.Learned.Requests, s.Corrections)
			if c.wantUsed > 0 && g.Used.Requests < c.wantUsed {
				t.Errorf("the window holds %d, want >= %d", g.Used.Requests, c.wantUsed)
			}
			if c.wantUsed == 0 && g.Used.Requests != base {
				t.Errorf("the window went from %d to %d on an answer far from the limit", base, g.Used.Requests)
			}
			if s.Learned.Requests != c.wantLimit {
				t.Errorf("limit in force %d, want %d", s.Learned.Requests, c.wantLimit)
			}
		})
	}
}

// A reload that changes the window gives the budget buckets of the new
// width (the old budget's blocks go back); the same window keeps it.
func TestLeaserBudgetWindowChange(t *testing.T) {
	l := NewLeaser(LeaserConfig{Store: NewInmemStore(), Node: "a"})
	cfg := Config{Key: "k", Limits: limiter.Limits{Requests: 100}, Window: 3 * time.Second}
	b1 := l.Budget(cfg, nil)
	cfg.Limits.Requests = 200
	if b2 := l.Budget(cfg, nil); b2 != b1 || b2.Stats(0).Limits.Requests != 200 {
		t.Fatal("a new limit on the same window did not keep the budget")
	}
	cfg.Window = 6 * time.Second
	b3 := l.Budget(cfg, nil)
	if b3 == b1 || b3.width != int64(6*time.Second)/Span {
		t.Fatalf("a new window kept buckets of %v", time.Duration(b3.width))
	}
}

// Two windows of one budget (a rolling reload that changes limits.window)
// are kept apart: bucket indexes of one width mean nothing in the other's.
func TestBudgetWindowsOfTwoWidths(t *testing.T) {
	ctx := context.Background()
	st := NewInmemStore()
	now := int64(1000 * time.Hour)
	clock := func() int64 { return now }
	take := func(window time.Duration) (int, *Leaser) {
		l := NewLeaser(LeaserConfig{Store: st, Node: "a", Clock: clock})
		b := l.Budget(Config{Key: "k", Limits: limiter.Limits{Requests: 100}, Window: window}, nil)
		admitted := 0
		for range 20 {
			for range 20 {
				if tk, d := b.Take(now, 1); d.Allowed {
					admitted++
					b.Finish(now, &tk, 1)
				}
			}
			l.Maintain(ctx)
			now += int64(time.Millisecond)
		}
		return admitted, l
	}
	first, _ := take(time.Second)
	second, _ := take(2 * time.Second) // wider buckets: smaller indexes, the old ones ahead
	t.Logf("admitted %d on the 1s window, then %d on the 2s one", first, second)
	if first == 0 || second == 0 {
		t.Errorf("admitted %d, then %d: a window of another width blocked the budget", first, second)
	}
}

// A lower limit (a reload) leaves the blocks granted under the higher one
// nothing more to admit; a request larger than what any block has left
// makes the next grant bring room for it.
func TestBudgetLowerLimitAndLargeRequest(t *testing.T) {
	ctx := context.Background()
	const window = 3 * time.Second
	t.Run("lower limit", func(t *testing.T) {
		st := NewInmemStore()
		now := int64(1000 * time.Hour)
		l := NewLeaser(LeaserConfig{Store: st, Node: "a", Clock: func() int64 { return now }})
		cfg := Config{Key: "k", Limits: limiter.Limits{Requests: 1000}, Window: window}
		b := l.Budget(cfg, nil)
		admitted := 0
		for range 50 { // a block of about the demand
			for range 20 {
				if tk, d := b.Take(now, 1); d.Allowed {
					admitted++
					b.Finish(now, &tk, 1)
				}
			}
			l.Maintain(ctx)
			now += int64(time.Millisecond)
		}
		cfg.Limits.Requests = int64(admitted + 10)
		l.Budget(cfg, nil) // the reload
		after := 0
		for range 50 {
			for range 20 {
				if tk, d := b.Take(now, 1); d.Allowed {
					after++
					b.Finish(now, &tk, 1)
				}
			}
			l.Maintain(ctx)
			now += int64(time.Millisecond)
		}
		t.Logf("admitted %d, then %d after the limit fell to %d", admitted, after, cfg.Limits.Requests)
		if admitted+after > int(cfg.Limits.Requests) {
			t.Errorf("%d admitted in the window, the new limit is %d", admitted+after, cfg.Limits.Requests)
		}
	})
	t.Run("large request", func(t *testing.T) {
		st := NewInmemStore()
		now := int64(1000 * time.Hour)
		l := NewLeaser(LeaserConfig{Store: st, Node: "a", Clock: func() int64 { return now }})
		b := l.Budget(Config{Key: "k", Limits: limiter.Limits{Tokens: 100000}, Window: window}, nil)
		for range 20 { // small requests: a small block
			if tk, d := b.Take(now, 10); d.Allowed {
				b.Finish(now, &tk, 10)
			}
			l.Maintain(ctx)
			now += int64(time.Millisecond)
		}
		if _, d := b.Take(now, 5000); d.Allowed {
			t.Skip("the block had room already")
		}
		l.Maintain(ctx)
		now += int64(time.Millisecond)
		if _, d := b.Take(now, 5000); !d.Allowed {
			t.Errorf("a 5000-token request is still refused with %d of 100000 tokens in the window", b.Stats(now).Used.Tokens)
		}
	})
}

// A provider that settles (Anthropic) gets its unused tokens back in the
// block; one that does not (OpenAI) keeps the charge made at the start.
func TestBudgetSettles(t *testing.T) {
	for _, settles := range []bool{true, false} {
		st := NewInmemStore()
		now := int64(1000 * time.Hour)
		l := NewLeaser(LeaserConfig{Store: st, Node: "a", Clock: func() int64 { return now }})
		b := l.Budget(Config{Key: "k", Limits: limiter.Limits{Tokens: 10000}, Window: 3 * time.Second, Settles: settles}, nil)
		b.Take(now, 1000) // demand, then a block
		l.Maintain(context.Background())
		before := b.Stats(now).Left.Tokens
		tk, d := b.Take(now, 1000)
		if !d.Allowed {
			t.Fatalf("settles=%v: refused with %d left", settles, before)
		}
		b.Finish(now, &tk, 300)
		want := before - 1000
		if settles {
			want = before - 300
		}
		if got := b.Stats(now).Left.Tokens; got != want {
			t.Errorf("settles=%v: %d tokens left after a 1000-token charge settled at 300, want %d", settles, got, want)
		}
	}
}
