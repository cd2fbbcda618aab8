package status

import (
	"slices"
	"testing"
)

// Busier puts the fullest window against its limit first, then the longer
// queue, then more requests, then the name.
func TestBusier(t *testing.T) {
	type row struct {
		name   string
		u      Usage
		queued int64
	}
	req := func(used, limit int64) Usage { return Usage{Requests: Dimension{Used: used, Limit: limit}} }
	rows := []row{
		{"e", req(5, 0), 0},   // no limit: empty, 5 requests
		{"d", req(1, 100), 0}, // 1%
		{"a", req(9, 10), 0},  // 90%
		{"c", req(1, 100), 3}, // 1%, queued
		{"b", Usage{InFlight: Dimension{Used: 9, Limit: 10}}, 0}, // 90%, fewer requests than a
		{"f", req(5, 0), 0}, // as e, named after it
	}
	slices.SortFunc(rows, func(x, y row) int { return Busier(x.u, x.queued, x.name, y.u, y.queued, y.name) })
	var got []string
	for _, r := range rows {
		got = append(got, r.name)
	}
	if want := []string{"a", "b", "c", "d", "e", "f"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}
