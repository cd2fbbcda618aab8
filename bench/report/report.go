package main

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// writeReport writes the tables, the charts' links and what made them,
// and the figures of the benchmarks and report tests when f is not nil.
func writeReport(path string, lat []latencyRow, acc []accuracy, rates []int, f *figures, rows [][2]string, quick bool, took time.Duration) error {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# ringgate against the alternatives\n\n")
	w("%s\n\n", madeBy(quick, took))
	w("The targets: **ringgate**, a 3-node cluster with Redis, each request to any node (the round robin of an L4 balancer: 2 in 3 take a hop to the tenant's owner); ")
	w("**redis-per-request**, 3 bare fasthttp proxies each running the seed article's atomic Lua sliding window in one Redis before forwarding (its script, package `bench/seedlimit`, sums every charge in the window on each call: with limits that never bind the window holds thousands, which is what its latency at 1 000/s and more shows); ")
	w("**local-limits**, 3 standalone ringgate nodes, each with the whole limits and no coordination; ")
	w("**floor**, a bare fasthttp reverse proxy; **direct**, to the provider.\n\n")

	w("## Latency and throughput\n\nOpen loop at each offered rate (each request sent at its time, whatever the answers before), limits that never bind; latency from sending a request to its whole answer. Saturated: 16 closed-loop clients.\n\n")
	w("%s", latencyTable(lat, rates))
	w("\n![latency against load](latency.png)\n\n")

	w("## Accuracy through changes\n\n%s\n\n", accuracyIntro(acc))
	w("%s", accuracyTable(acc))
	w("\n![admitted per window against the limit](accuracy.png)\n\n")
	w("What each line means: the fullest sliding window (window less window/64, the buckets' grain) any tenant had at the provider over the run, against its limit; ")
	w("admitted is what reached the provider over the tenants' limits at their steady rate for the run's length (a perfect sliding window admits about 1.00 over a run of whole windows, and up to one window's worth more: the first window starts empty); ")
	w("breaches are requests the provider refused for its own limit (a gateway let through more than the provider takes). ")
	w("Utilisation is what each tenant's whole %v windows after the first (tumbling, from the start) held at the provider against its limit, the mean over tenants and windows and the emptiest one: the tenant is sent twice its limit throughout, so a window below 1.00 is what a gateway held back that the promise allowed, and the emptiest says what the worst change cost.\n\n", window)
	w("%s\n", killNote)
	if f != nil {
		w("\n## Headline figures\n\n%s", rowsTable(rows))
		w("\n## Hot paths and scale\n\nEvery `go test -bench` line of this run (%s):\n\n", benchCommands())
		w("%s", f.benchTable())
		for _, t := range reportTests {
			w("\n## `go test %s`\n%s", strings.Join(t.args, " "), f.tables[t.name])
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// madeBy says which command, machine and day made the figures.
func madeBy(quick bool, took time.Duration) string {
	s := "Made by `make bench-report` (`go run ./bench/report`)"
	if quick {
		s += " with `-quick` (short phases: a smoke run, not for publishing)"
	}
	return s + fmt.Sprintf(" on %s, %s, in %v. Everything on loopback: the fake provider (no latency of its own), the gateways, the load.",
		time.Now().UTC().Format("2006-01-02"), machine(), took.Round(time.Second))
}

// benchCommands lists the go test -bench commands of the figures phase.
func benchCommands() string {
	var cs []string
	for _, s := range benchSets {
		cs = append(cs, "`go test "+strings.Join(s.args, " ")+"`")
	}
	return strings.Join(cs, ", ")
}

// latencyTable is the latency and throughput of every target.
func latencyTable(lat []latencyRow, rates []int) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("| target |")
	for _, r := range rates {
		w(" p50 / p99 at %d/s (ms) |", r)
	}
	w(" saturated req/s | vs floor | not 200 |\n| --- |")
	for range rates {
		w(" ---: |")
	}
	w(" ---: | ---: | ---: |\n")
	var floorSat float64
	for _, r := range lat {
		if r.name == "floor" {
			floorSat = r.sat
		}
	}
	for _, r := range lat {
		w("| %s |", r.name)
		for _, rate := range rates {
			w(" %.2f / %.2f |", ms(r.p50[rate]), ms(r.p99[rate]))
		}
		w(" %.0f | %.2f× | %d |\n", r.sat, r.sat/max(floorSat, 1), r.failed)
	}
	return b.String()
}

// accuracyIntro says what the accuracy scenario did.
func accuracyIntro(acc []accuracy) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("%d tenants, each limited to %d requests per %v window and sent twice that, through 3 gateways; the provider's own limit is %d per window (above the sum of the tenants' limits, below what they send), enforced by the fake provider, which refuses and counts what breaches it.", tenants, tenantLimit, window, providerLimit)
	if len(acc) > 0 {
		w(" Events: ")
		for i, e := range acc[0].events {
			if i > 0 {
				w(", ")
			}
			w("%s at %.1f s", e.what, e.at.Seconds())
		}
		w(" (a fourth gateway joins; one drains, the balancer stops sending to it at once; the three left are restarted one at a time, each drained, then started again under its name at a new address, as a StatefulSet's rolling restart does")
		for i, a := range acc {
			if i == 0 {
				w(": it took ")
			} else {
				w(", ")
			}
			w("%.1f s for %s", a.restartTook.Seconds(), a.name)
		}
		w("; one is killed with calls in flight).")
	}
	return b.String()
}

// accuracyTable is each limiting system's accuracy through the changes.
func accuracyTable(acc []accuracy) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| system | fullest window of a tenant at the provider (limit %d) | over the limit | admitted / the limits' steady rate | utilisation per window: mean / emptiest | fullest window sent to the provider, all tenants (its limit %d) | provider limit breached | answers |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n", tenantLimit, providerLimit)
	for _, a := range acc {
		worst := 0
		for _, v := range a.worst {
			worst = max(worst, v)
		}
		allowed := float64(tenants*tenantLimit) * a.length.Seconds() / window.Seconds()
		fmt.Fprintf(&b, "| %s | %d | %+.0f %% | %.2f | %.2f / %.2f | %d | %d | %v |\n", a.name, worst, 100*(float64(worst)/tenantLimit-1), float64(a.admitted)/max(allowed, 1), a.utilMean, a.utilLow, a.sentAll, a.breaches, a.answers)
	}
	return b.String()
}

// killNote explains what a kill -9 costs each system.
const killNote = "After the kill -9, ringgate admits less for the tenants the killed node owned, never more. Until the survivors' rings drop the node (failure detection, about 2.5 s with the default gossip timings) each enforces its strict share, seeded with its share of the owner's last Redis snapshot and the time since at the peak rate, and admits as the owner's old admissions leave the window: about two thirds of the limit here (two survivors' shares of three). The calls in flight on the killed node, most of them waiting in its queues for room in the window, are cut: its own clients see the connection close (the answers counted as 0), and the nodes that had passed them to it answer 502 `owner_failed` (it may have admitted them; they are not retried). Then the new owner takes the tenant from that snapshot and counts the time since at the peak rate, as if the dead node had admitted all along; with this report's 2 s window, 2.5 s of detection is more than a window, so the tenant gets little or nothing until that charge leaves the window (the chart; the emptiest tumbling window shows it when one falls on it). With a 60 s window the same crash charges a few seconds at the peak rate, a few per cent of the window. The local limits admit what each node allows, about (nodes) times the limit when the load spreads; the Redis baseline is exact but puts a Redis round trip on every request."

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
