package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strings"
)

// The README's figures are written between these markers, every one from
// the run that writes docs/bench/report.md; nothing else in the README is
// a measurement.
const (
	readmeBegin = "<!-- bench-report:begin (written by make bench-report: do not edit) -->"
	readmeEnd   = "<!-- bench-report:end -->"
)

// picker reads figures and keeps the first one missing.
type picker struct {
	f   *figures
	err error
}

func (p *picker) b(name, unit string) float64 {
	v, err := p.f.bench(name, unit)
	if err != nil && p.err == nil {
		p.err = err
	}
	return v
}

func (p *picker) t(test, key string) float64 {
	v, err := p.f.test(test, key)
	if err != nil && p.err == nil {
		p.err = err
	}
	return v
}

// figureRows are the README's figures table: what was measured and how
// it came out, each from this run.
func figureRows(f *figures) ([][2]string, error) {
	p := &picker{f: f}
	const lat, hop, many, fairShare = "added-latency", "hop-latency", "many-tenants-cluster", "fair-share"
	// µs figures are shown whole, and a difference is of what is shown.
	us := func(test, key string) float64 { return math.Round(p.t(test, key)) }
	e2e := func(w string) string {
		return fmt.Sprintf("sequential p50: direct %.0f, floor %.0f, ringgate %.0f µs (**%+.0f µs** over the floor). "+
			"Open loop at %.0f requests/s, the median of %.0f interleaved rounds: p50 %.0f / %.0f / %.0f µs (**%+.0f µs**; +30 asked), "+
			"p99 **%.2f×** the floor's (rounds %.2f–%.2f; ≤ 2× asked). "+
			"Saturated, the median of %.0f rounds, %.0f clients: **%.2f×** the floor's throughput (rounds %.2f–%.2f; ≥ 0.9× asked), "+
			"%.1f against %.1f µs of CPU a request (the test process's, clients and fake provider included; %.2f× the floor's)",
			us(lat, w+"_seq_p50_direct_us"), us(lat, w+"_seq_p50_floor_us"), us(lat, w+"_seq_p50_ringgate_us"),
			us(lat, w+"_seq_p50_ringgate_us")-us(lat, w+"_seq_p50_floor_us"),
			p.t(lat, "open_rate"), p.t(lat, "rounds"),
			us(lat, w+"_open_p50_direct_us"), us(lat, w+"_open_p50_floor_us"), us(lat, w+"_open_p50_ringgate_us"),
			us(lat, w+"_open_p50_ringgate_us")-us(lat, w+"_open_p50_floor_us"),
			p.t(lat, w+"_open_p99_ratio"), p.t(lat, w+"_open_p99_ratio_min"), p.t(lat, w+"_open_p99_ratio_max"),
			p.t(lat, "sat_rounds"), p.t(lat, w+"_sat_clients"), p.t(lat, w+"_sat_ratio"), p.t(lat, w+"_sat_ratio_min"), p.t(lat, w+"_sat_ratio_max"),
			p.t(lat, w+"_sat_cpu_ringgate_us"), p.t(lat, w+"_sat_cpu_floor_us"), p.t(lat, w+"_sat_cpu_ratio"))
	}
	hopRow := func(w string) string {
		l, fw := us(hop, w+"_p50_local_us"), us(hop, w+"_p50_forwarded_us")
		return fmt.Sprintf("%.0f µs vs %.0f µs: **%+.0f µs** (%.2f×)", fw, l, fw-l, fw/l)
	}
	dec := p.b("BenchmarkDecisionVsRedis/ringgate", "ns/op")
	incr := p.b("BenchmarkDecisionVsRedis/redis-incr-per-request", "ns/op")
	lua := p.b("BenchmarkDecisionVsRedis/redis-lua-per-request", "ns/op")
	rows := [][2]string{
		{"limit decision, admit + settle + release on all three dimensions (`BenchmarkDecision`)",
			fmt.Sprintf("%.0f ns, %.0f allocs; in parallel (wall time per decision, all goroutines together), one tenant per goroutine: %.0f ns; one hot tenant shared by all: %.0f ns",
				p.b("BenchmarkDecision", "ns/op"), p.b("BenchmarkDecision", "allocs/op"),
				p.b("BenchmarkDecisionParallel", "ns/op"), p.b("BenchmarkDecisionHotTenant", "ns/op"))},
		{"owner lookup on the ring (`BenchmarkOwner`)",
			fmt.Sprintf("%.1f ns, %.0f allocs", p.b("BenchmarkOwner", "ns/op"), p.b("BenchmarkOwner", "allocs/op"))},
		{"the decision vs one Redis call per request, a tenant with 1 000 charges in its window (`BenchmarkDecisionVsRedis`)",
			fmt.Sprintf("%.0f ns in RAM vs %.0f µs for a bare `INCRBY` round trip (%.0f×) and %.2f ms for the seed article's Lua sliding window, which sums the window on every call (%.0f×)",
				dec, incr/1e3, incr/max(dec, 1), lua/1e6, lua/max(dec, 1))},
		{"heap of a node's state per configured tenant, 20 000 tenants with all three limits (`BenchmarkStateMemory`)",
			fmt.Sprintf("%.0f B before any request; a tenant's core (limiter, fallback ledger, spill, lines), made at its first use on the node, adds %.0f B",
				p.b("BenchmarkStateMemory", "heap-bytes/tenant"), p.b("BenchmarkStateMemory", "core-bytes/tenant"))},
		{"a standalone node configured with 100 000 tenants, then 10 000 of them driven with a request each (`BenchmarkManyTenants`)",
			fmt.Sprintf("ready in %.0f ms; heap +%.0f MiB once ready, +%.0f MiB after the 10 000; the test process (the fake provider in it) resident %.0f MiB",
				p.b("BenchmarkManyTenants", "ready-ms"), p.b("BenchmarkManyTenants", "heap-ready-MiB"),
				p.b("BenchmarkManyTenants", "heap-driven-MiB"), p.b("BenchmarkManyTenants", "rss-driven-MiB"))},
		{fmt.Sprintf("three ringgate processes with Redis snapshots, each configured with %.0f tenants; %.0f driven through all three; a fourth joins, then the second drains (`TestManyTenantsClusterReport`)",
			p.t(many, "configured"), p.t(many, "driven")),
			fmt.Sprintf("start to ready %.1f–%.1f s; resident **%.0f–%.0f MiB** once ready and **%.0f–%.0f MiB** after the load (≤ 200 MiB asked). "+
				"Scale-up: %.0f tenants moved, %.0f of the %.0f gained taken from their previous owner, each decidable on its new owner %.0f–%.0f ms after its ring changed. "+
				"Drain: %.0f moved, %.0f of %.0f from their previous owner, %.0f–%.0f ms; the drained node out (exit 0) in %.2f s",
				p.t(many, "ready_ms_min")/1e3, p.t(many, "ready_ms_max")/1e3,
				p.t(many, "rss_ready_mib_min"), p.t(many, "rss_ready_mib_max"), p.t(many, "rss_load_mib_min"), p.t(many, "rss_load_mib_max"),
				p.t(many, "up_moved"), p.t(many, "up_peer"), p.t(many, "up_taken"), p.t(many, "up_handoff_ms_min"), p.t(many, "up_handoff_ms_max"),
				p.t(many, "down_moved"), p.t(many, "down_peer"), p.t(many, "down_taken"), p.t(many, "down_handoff_ms_min"), p.t(many, "down_handoff_ms_max"),
				p.t(many, "drain_exit_ms")/1e3)},
		{"a provider's limit (rpm, tpm, concurrency in turn) wanted by three tenants, two owned by one node and one by another, each wanting more than its share (`TestFairShareReport`)",
			fmt.Sprintf("Jain's index of what each got against its fair share, split among the nodes vs divided among the tenants: rpm %.2f → **%.2f**, tpm %.2f → **%.2f**, concurrency %.2f → **%.2f**; weights 1:2:3 %.2f → **%.2f**; a batch tenant beside an interactive one %.2f → **%.2f**",
				p.t(fairShare, "jain_split_rpm"), p.t(fairShare, "jain_rpm"), p.t(fairShare, "jain_split_tpm"), p.t(fairShare, "jain_tpm"),
				p.t(fairShare, "jain_split_concurrency"), p.t(fairShare, "jain_concurrency"),
				p.t(fairShare, "jain_split_weights_123"), p.t(fairShare, "jain_weights_123"),
				p.t(fairShare, "jain_split_batch_after_interactive"), p.t(fairShare, "jain_batch_after_interactive"))},
		{"prompt tokens of a short message counted again: a system prompt, a chat's history (`BenchmarkCount`)",
			fmt.Sprintf("%.0f ns from the tokenizer's table of recent counts vs %.2f µs counted (its words counted before; %.1f µs through the library's own pre-tokenizer); 4 KiB of random base64, pieces mostly new: %.0f µs",
				p.b("BenchmarkCount/remembered", "ns/op"), p.b("BenchmarkCount/counted", "ns/op")/1e3,
				p.b("BenchmarkCount/library", "ns/op")/1e3, p.b("BenchmarkCount/base64-4KiB", "ns/op")/1e3)},
		{"prompt estimate from its size with a learned ratio, and the reservation, for 1k, 10k and 100k tokens (`BenchmarkEstimate`)",
			fmt.Sprintf("%.0f, %.0f, %.0f ns, %.0f allocs; counted by the tokenizer instead: %.3f ms, %.2f ms, %.1f ms",
				p.b("BenchmarkEstimate/1k/ratio", "ns/op"), p.b("BenchmarkEstimate/10k/ratio", "ns/op"), p.b("BenchmarkEstimate/100k/ratio", "ns/op"),
				p.b("BenchmarkEstimate/100k/ratio", "allocs/op"),
				p.b("BenchmarkEstimate/1k/tokenizer", "ns/op")/1e6, p.b("BenchmarkEstimate/10k/tokenizer", "ns/op")/1e6, p.b("BenchmarkEstimate/100k/tokenizer", "ns/op")/1e6)},
		{"the handler's own work: a JSON request handed to ringgate's handler and to the floor's, one at a time, the same fake provider on loopback (`BenchmarkHandler`)",
			fmt.Sprintf("ringgate %.1f µs of CPU a request against the floor's %.1f: **%+.1f µs** (the process's CPU, the fake provider's included)",
				p.b("BenchmarkHandler/ringgate", "cpu-µs/op"), p.b("BenchmarkHandler/floor", "cpu-µs/op"),
				p.b("BenchmarkHandler/ringgate", "cpu-µs/op")-p.b("BenchmarkHandler/floor", "cpu-µs/op"))},
		{"a chat request's body parsed: model, limits, texts (`BenchmarkParseRequest`)",
			fmt.Sprintf("%.2f µs, %.0f allocs", p.b("BenchmarkParseRequest", "ns/op")/1e3, p.b("BenchmarkParseRequest", "allocs/op"))},
		{"ringgate against a bare fasthttp reverse proxy (the floor, `bench/floor`) and direct to the fake provider, in one process, interleaved, JSON chat (`TestAddedLatencyReport`)", e2e("json")},
		{"same, an SSE stream (the floor relays it read by read, flushing each)", e2e("stream")},
		{"same, JSON, with enough clients to saturate the CPUs", fmt.Sprintf(
			"%.0f clients, the median of %.0f rounds: **%.2f×** the floor's throughput (rounds %.2f–%.2f; ≥ 0.9× asked), %.1f against %.1f µs of CPU a request (%.2f× the floor's)",
			p.t(lat, "json_sat_many_clients"), p.t(lat, "sat_rounds"), p.t(lat, "json_sat_many_ratio"),
			p.t(lat, "json_sat_many_ratio_min"), p.t(lat, "json_sat_many_ratio_max"),
			p.t(lat, "json_sat_many_cpu_ringgate_us"), p.t(lat, "json_sat_many_cpu_floor_us"), p.t(lat, "json_sat_many_cpu_ratio"))},
		{"a forwarded request (edge → owner hop) vs the same request sent to its owner, JSON, p50 (`TestHopLatencyReport`)", hopRow("json")},
		{"same, SSE stream, p50", hopRow("stream")},
		{"snapshot encode / decode, one tenant (`BenchmarkEncode`, `BenchmarkDecode`)",
			fmt.Sprintf("%.2f µs / %.2f µs", p.b("BenchmarkEncode", "ns/op")/1e3, p.b("BenchmarkDecode", "ns/op")/1e3)},
		{"snapshots saved to Redis in one pipelined batch, per tenant (`BenchmarkSaveBatch`)",
			fmt.Sprintf("%.1f µs (batch of 100), %.1f µs (batch of 1 000)", p.b("BenchmarkSaveBatch/100", "µs/tenant"), p.b("BenchmarkSaveBatch/1000", "µs/tenant"))},
		{"a new owner's handoff from the final snapshots in Redis (`BenchmarkHandoffTake`)",
			fmt.Sprintf("%.0f µs for 1 tenant, %.2f ms for 100 (%.1f µs each)",
				p.b("BenchmarkHandoffTake/tenants=1", "ns/op")/1e3, p.b("BenchmarkHandoffTake/tenants=100", "ns/op")/1e6, p.b("BenchmarkHandoffTake/tenants=100", "µs/tenant"))},
	}
	return rows, p.err
}

// readmeBlock is what goes between the README's markers.
func readmeBlock(head, latency, acc string, rows [][2]string) string {
	var b strings.Builder
	b.WriteString(readmeBegin + "\n\n")
	b.WriteString(head)
	b.WriteString("\n" + latency + "\n" + acc)
	fmt.Fprintf(&b, "\nAfter the kill -9, ringgate admits less for the tenants the dead node owned, never more: their new owner counts the time until it took over at the peak rate, so with this %v window, shorter than failure detection, such a tenant can get nothing for a while (the emptiest window shows it when one falls there). The answers 0 and 502 are the calls in flight on the killed node, cut with it. The report explains both.\n", window)
	b.WriteString("\n![admitted per window against the limit](docs/bench/accuracy.png)\n![latency against load](docs/bench/latency.png)\n\n")
	b.WriteString("| measured | figure |\n| --- | --- |\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s |\n", r[0], r[1])
	}
	b.WriteString("\n" + readmeEnd)
	return b.String()
}

// spliceReadme puts block between the markers in the README at path.
func spliceReadme(path, block string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	i := bytes.Index(old, []byte(readmeBegin))
	j := bytes.Index(old, []byte(readmeEnd))
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %q … %q block", path, readmeBegin, readmeEnd)
	}
	out := append(append(append([]byte{}, old[:i]...), block...), old[j+len(readmeEnd):]...)
	return os.WriteFile(path, out, 0o644)
}
