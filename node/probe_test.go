package node

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/ringgate/ringgate/internal/procstat"
)

// TestSaturationProbe is the saturation rounds of TestAddedLatencyReport
// alone, for comparing two builds (`make bench-ab`, bench/ab): floor and
// ringgate back to back in each round, JSON chat, from the number of
// clients RINGGATE_SATURATION_PROBE names, and one line a round for the
// driver to read. A single run's ratio moves with the machine more than a
// change to the request path does; builds alternated run by run share its
// moments.
//
//	RINGGATE_SATURATION_PROBE=64 go test -run SaturationProbe -v ./node/
func TestSaturationProbe(t *testing.T) {
	clients, err := strconv.Atoi(os.Getenv("RINGGATE_SATURATION_PROBE"))
	if err != nil || clients <= 0 {
		t.Skip("RINGGATE_SATURATION_PROBE=<clients> runs it")
	}
	const rounds, total = 8, 20000 // bench/ab reads 8 rounds a run
	env := newBenchEnv(t)
	ts := env.targets(false)
	floor, ringgate := ts[1], ts[2]
	for _, tg := range []target{floor, ringgate} {
		throughput(t, tg, clients, 2000) // connections open, pools warm
	}
	for r := range rounds {
		var rps, cpu [2]float64
		for k := range 2 {
			i := (k + r) % 2
			cpu0 := procstat.CPU()
			rps[i] = throughput(t, []target{floor, ringgate}[i], clients, total)
			cpu[i] = micros(procstat.CPU()-cpu0) / total
		}
		fmt.Printf("probe clients=%d round=%d floor_rps=%.0f ringgate_rps=%.0f floor_cpu_us=%.2f ringgate_cpu_us=%.2f\n",
			clients, r, rps[0], rps[1], cpu[0], cpu[1])
	}
}
