package provider

import (
	"time"

	"github.com/ringgate/ringgate/router/internal/status"
)

// View is the upstream's budgets as /upstreams shows them at now, with
// down its on_redis_down: its own limits (nil: none), and its models',
// configured and learned (nil: none).
func (pb *Budgets) View(now int64, down string) (limits *status.Budget, models map[string]*status.Budget) {
	if pb.up != nil {
		limits = status.BudgetOf(pb.up.Stats(now), pb.up.line, down)
	}
	for m, b := range pb.models {
		if models == nil {
			models = make(map[string]*status.Budget)
		}
		models[m] = status.BudgetOf(b.Stats(now), b.line, down)
	}
	for m, lb := range pb.learned.all() {
		if models == nil {
			models = make(map[string]*status.Budget)
		}
		v := status.BudgetOf(lb.Line.Stats(now), lb.Line.line, down)
		v.Learned = &status.Learned{Requests: lb.limits.Requests, Tokens: lb.limits.Tokens, From: lb.from, Since: lb.since.UTC().Format(time.RFC3339)}
		models[m] = v
	}
	return limits, models
}
