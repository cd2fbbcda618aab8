package router

import (
	"context"
	"testing"
	"time"

	"github.com/ringgate/ringgate/admit"
	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/lease"
	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/spill"
	"github.com/ringgate/ringgate/upstream"
)

// A spill's room taken back gives back everything its Take did: its
// request to the budget's block, the mirror's charge, and the ledger
// entry the owner would be told of, which nets to nothing.
func TestSpillRoomCancelGivesEverythingBack(t *testing.T) {
	now := time.Now().UnixNano()
	leaser := lease.NewLeaser(lease.LeaserConfig{Store: lease.NewInmemStore(), Node: "t", Clock: func() int64 { return now }})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ran := make(chan struct{})
	go func() { leaser.Run(ctx); close(ran) }() // grants the spill's blocks
	r, cfg := testRouter(t, Options{Clock: newSetClock(now), Leaser: leaser})
	cfg.Tenants = []config.Tenant{{Name: "hot", Keys: []string{"k"}, RPM: 1}}
	if err := r.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	tn := r.state.Load().ByName["hot"]
	sp, _ := r.spills.Node.Join(spill.Msg{Tenant: "hot", Owner: "owner", Epoch: 1, Limits: limiter.Limits{Requests: 100}},
		tn.Core().Spill) // served a lease term from now: the clock stands still
	take := func() (*call, admit.Verdict) {
		c := &call{r: r, t: tn, lim: sp.Mirror, sp: sp, req: upstream.Request{Model: "gpt-4o"}}
		c.res.Total = 10
		return c, (*spillRoom)(c).Take()
	}
	var c *call
	var v admit.Verdict
	for range 200 { // the first grant is on its way
		if c, v = take(); v == admit.Taken {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if v != admit.Taken || c.fb == nil {
		t.Fatalf("first take: %v, ledger entry %v; want taken and entered", v, c.fb)
	}
	// No more maintenance: a block given back to the store keeps what
	// was taken from it counted there (lease's conservative rule), and
	// this test is about what the room gives back.
	cancel()
	<-ran
	left := sp.Budget.Stats(now).Left.Requests
	e := c.fb
	(*spillRoom)(c).Cancel()
	if u := sp.Mirror.Usage(now); u.Requests != 0 || u.Tokens != 0 || u.InFlight != 0 {
		t.Errorf("the mirror holds %+v after the cancel, want nothing", u)
	}
	if d := c.t.Core().Fb.Delta(e); d.Requests != 0 || d.Tokens != 0 || d.Slots != 0 {
		t.Errorf("the ledger entry says %+v after the cancel, want nothing to tell", d)
	}
	if got := sp.Budget.Stats(now).Left.Requests; got != left+1 {
		t.Errorf("the budget's block has %d requests left after the cancel, want %d (the call's given back)", got, left+1)
	}
}
