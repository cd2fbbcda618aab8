package moves

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/ringgate/ringgate/limiter"
)

// Whatever a peer's delta report says (it is signed, but a bug or a
// version skew can send anything), decoding it and applying its deltas to
// a tenant's limiter does not panic, and the limiter goes on deciding
// within its limits: no window counts below zero, no admission past them.
func FuzzApplyDeltas(f *testing.F) {
	f.Add([]byte(`{"tenant":"acme","from":"n2","deltas":[{"Bucket":29400000,"SlotBucket":490000,"Requests":1,"Tokens":10,"Slots":1}]}`))
	f.Add([]byte(`{"tenant":"acme","deltas":[{"Bucket":-1,"SlotBucket":9223372036854775807,"Requests":-5,"Tokens":-9223372036854775808,"Slots":-3}]}`))
	f.Add([]byte(`{"deltas":[{"Bucket":29400000,"Tokens":9223372036854775807},{"Bucket":29400000,"Tokens":9223372036854775807}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m deltaMsg
		if json.Unmarshal(b, &m) != nil || len(m.Deltas) > 64 {
			return
		}
		const window = time.Minute
		lim := limiter.NewTenant(limiter.Limits{Requests: 10, Tokens: 1000, Concurrency: 2}, window, window)
		now := time.Unix(1_764_000_000, 0).UnixNano()
		for _, d := range m.Deltas {
			lim.ApplyFrom(now, m.From, d)
		}
		u := lim.Usage(now)
		if u.Requests < 0 || u.InFlight < 0 {
			t.Fatalf("usage %+v after %s", u, b)
		}
		before := u
		_, d := lim.Admit(now, 1)
		if d.Allowed && (before.Requests >= 10 || before.InFlight >= 2 || before.Tokens+1 > 1000) {
			t.Fatalf("admitted past the limits: usage %+v after %s", before, b)
		}
		lim.Usage(now + int64(2*window)) // the window rolls past it all
	})
}
