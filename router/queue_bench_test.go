package router

import (
	"testing"
	"time"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/queue"
)

// What an empty queue adds to a decision: the check for waiters before it
// and the Kick after the call ends, against the plain decision, in the
// same run.
func BenchmarkDecisionEmptyQueue(b *testing.B) {
	lim := limiter.NewTenant(limiter.Limits{Requests: 1 << 40, Tokens: 1 << 40, Concurrency: 1 << 30}, time.Minute, 10*time.Minute)
	t := &tenant{lim: lim, queue: &queue.Queue{}}
	t.waits[queue.Interactive] = 2 * time.Second
	now := time.Now().UnixNano()
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			tk, _ := lim.Admit(now, 100)
			lim.Finish(now, &tk, 100)
		}
	})
	b.Run("empty-queue", func(b *testing.B) {
		for b.Loop() {
			if t.queue.Waiting() > 0 {
				b.Fatal("waiters")
			}
			tk, _ := lim.Admit(now, 100)
			lim.Finish(now, &tk, 100)
			t.queue.Kick()
		}
	})
}
