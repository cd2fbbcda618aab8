package gossip

import (
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestMeasureDetection repeats the crash measurement for the numbers quoted
// in LANFast's comment. Off by default (it takes ~4 s per round):
//
//	GOSSIP_MEASURE=10 go test -race -run TestMeasureDetection -v ./gossip/
func TestMeasureDetection(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("GOSSIP_MEASURE"))
	if rounds <= 0 {
		t.Skip("set GOSSIP_MEASURE=<rounds> to run")
	}
	for _, size := range []int{3, 5} {
		var suspects, removals []time.Duration
		for range rounds {
			s, r := measureCrash(t, size)
			suspects, removals = append(suspects, s), append(removals, r)
		}
		slices.Sort(suspects)
		slices.Sort(removals)
		t.Logf("%d members, %d crashes: suspected min/median/max %v/%v/%v; removed by all min/median/max %v/%v/%v",
			size, rounds, suspects[0], suspects[len(suspects)/2], suspects[len(suspects)-1],
			removals[0], removals[len(removals)/2], removals[len(removals)-1])
	}
}

func measureCrash(t *testing.T, size int) (suspected, removed time.Duration) {
	lc := newLogCapture(t)
	var all []string
	for i := range size {
		all = append(all, string(rune('a'+i)))
	}
	nodes := startCluster(t, lc, all, false, nil)
	victim := all[size-1]
	crash := time.Now()
	_ = nodes[size-1].Shutdown()
	removed = waitFor(t, 15*time.Second, "survivors drop the victim", func() bool {
		for _, n := range nodes[:size-1] {
			if !sameNames(n.Members(), all[:size-1]...) {
				return false
			}
		}
		return true
	})
	at, ok := lc.first(func(r logRec) bool { return r.at.After(crash) && isSuspectLog(victim)(r) })
	if !ok {
		t.Fatal("no suspicion logged")
	}
	for _, n := range nodes {
		_ = n.Shutdown()
	}
	return at.Sub(crash).Round(time.Millisecond), removed.Round(time.Millisecond)
}
