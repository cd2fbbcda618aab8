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
// a measurement. The README shows the comparison; the headline figures
// table is the report's, to keep the README short.
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

// figureRows are the report's headline figures: what was measured and
// how it came out, each from this run.
func figureRows(f *figures) ([][2]string, error) {
	p := &picker{f: f}
	const lat, hop, many, fairShare = "added-latency", "hop-latency", "many-tenants-cluster", "fair-share"
	// µs figures are shown whole, and a difference is of what is shown.
	us := func(test, key string) float64 { return math.Round(p.t(test, key)) }
	e2e := func(w string) string {
		return fmt.Sprintf("p50 one at a time: direct %.0f, floor %.0f, ringgate %.0f µs (**%+.0f µs**). "+
			"At %.0f/s, median of %.0f rounds: p50 %.0f / %.0f / %.0f µs (**%+.0f µs**; goal +30), "+
			"p99 **%.2f×** the floor's (%.2f–%.2f; goal ≤ 2×). "+
			"Saturated, median of %.0f rounds, %.0f clients: **%.2f×** the floor's throughput (%.2f–%.2f; goal ≥ 0.9×), "+
			"CPU %.1f vs %.1f µs a request (%.2f×)",
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
		{"limit decision on three dimensions",
			fmt.Sprintf("%.0f ns, %.0f allocs; parallel, a tenant each: %.0f ns; one hot tenant: %.0f ns",
				p.b("BenchmarkDecision", "ns/op"), p.b("BenchmarkDecision", "allocs/op"),
				p.b("BenchmarkDecisionParallel", "ns/op"), p.b("BenchmarkDecisionHotTenant", "ns/op"))},
		{"owner lookup on the ring",
			fmt.Sprintf("%.1f ns, %.0f allocs", p.b("BenchmarkOwner", "ns/op"), p.b("BenchmarkOwner", "allocs/op"))},
		{"decision vs a Redis call, 1 000 charges in the window",
			fmt.Sprintf("%.0f ns vs %.0f µs for `INCRBY` (%.0f×), %.2f ms for a Lua sliding window (%.0f×)",
				dec, incr/1e3, incr/max(dec, 1), lua/1e6, lua/max(dec, 1))},
		{"heap per configured tenant",
			fmt.Sprintf("%.0f B idle, +%.0f B once used",
				p.b("BenchmarkStateMemory", "heap-bytes/tenant"), p.b("BenchmarkStateMemory", "core-bytes/tenant"))},
		{"one node, 100 000 tenants, 10 000 driven",
			fmt.Sprintf("ready in %.0f ms; heap +%.0f MiB, +%.0f MiB driven; resident %.0f MiB",
				p.b("BenchmarkManyTenants", "ready-ms"), p.b("BenchmarkManyTenants", "heap-ready-MiB"),
				p.b("BenchmarkManyTenants", "heap-driven-MiB"), p.b("BenchmarkManyTenants", "rss-driven-MiB"))},
		{fmt.Sprintf("3 nodes, %.0f tenants, %.0f driven; a fourth joins, one drains",
			p.t(many, "configured"), p.t(many, "driven")),
			fmt.Sprintf("ready in %.1f–%.1f s; resident **%.0f–%.0f MiB**, **%.0f–%.0f MiB** loaded (goal ≤ 200). "+
				"Scale-up: %.0f moved, %.0f of %.0f from their previous owner, ready %.0f–%.0f ms after the ring changed. "+
				"Drain: %.0f moved, %.0f of %.0f from their previous owner, %.0f–%.0f ms; node out in %.2f s",
				p.t(many, "ready_ms_min")/1e3, p.t(many, "ready_ms_max")/1e3,
				p.t(many, "rss_ready_mib_min"), p.t(many, "rss_ready_mib_max"), p.t(many, "rss_load_mib_min"), p.t(many, "rss_load_mib_max"),
				p.t(many, "up_moved"), p.t(many, "up_peer"), p.t(many, "up_taken"), p.t(many, "up_handoff_ms_min"), p.t(many, "up_handoff_ms_max"),
				p.t(many, "down_moved"), p.t(many, "down_peer"), p.t(many, "down_taken"), p.t(many, "down_handoff_ms_min"), p.t(many, "down_handoff_ms_max"),
				p.t(many, "drain_exit_ms")/1e3)},
		{"fair share of a provider's limit, 3 tenants on 2 nodes",
			fmt.Sprintf("Jain's index, split by node → by tenant: rpm %.2f → **%.2f**, tpm %.2f → **%.2f**, concurrency %.2f → **%.2f**; weights 1:2:3 %.2f → **%.2f**; batch beside interactive %.2f → **%.2f**",
				p.t(fairShare, "jain_split_rpm"), p.t(fairShare, "jain_rpm"), p.t(fairShare, "jain_split_tpm"), p.t(fairShare, "jain_tpm"),
				p.t(fairShare, "jain_split_concurrency"), p.t(fairShare, "jain_concurrency"),
				p.t(fairShare, "jain_split_weights_123"), p.t(fairShare, "jain_weights_123"),
				p.t(fairShare, "jain_split_batch_after_interactive"), p.t(fairShare, "jain_batch_after_interactive"))},
		{"a short message's tokens counted again",
			fmt.Sprintf("%.0f ns remembered vs %.2f µs counted (library: %.1f µs); 4 KiB random base64: %.0f µs",
				p.b("BenchmarkCount/remembered", "ns/op"), p.b("BenchmarkCount/counted", "ns/op")/1e3,
				p.b("BenchmarkCount/library", "ns/op")/1e3, p.b("BenchmarkCount/base64-4KiB", "ns/op")/1e3)},
		{"prompt estimate, 1k, 10k, 100k tokens",
			fmt.Sprintf("%.0f, %.0f, %.0f ns, %.0f allocs; tokenizer: %.3f, %.2f, %.1f ms",
				p.b("BenchmarkEstimate/1k/ratio", "ns/op"), p.b("BenchmarkEstimate/10k/ratio", "ns/op"), p.b("BenchmarkEstimate/100k/ratio", "ns/op"),
				p.b("BenchmarkEstimate/100k/ratio", "allocs/op"),
				p.b("BenchmarkEstimate/1k/tokenizer", "ns/op")/1e6, p.b("BenchmarkEstimate/10k/tokenizer", "ns/op")/1e6, p.b("BenchmarkEstimate/100k/tokenizer", "ns/op")/1e6)},
		{"handler CPU a JSON request",
			fmt.Sprintf("ringgate %.1f µs, floor %.1f: **%+.1f µs**",
				p.b("BenchmarkHandler/ringgate", "cpu-µs/op"), p.b("BenchmarkHandler/floor", "cpu-µs/op"),
				p.b("BenchmarkHandler/ringgate", "cpu-µs/op")-p.b("BenchmarkHandler/floor", "cpu-µs/op"))},
		{"chat body parsed",
			fmt.Sprintf("%.2f µs, %.0f allocs", p.b("BenchmarkParseRequest", "ns/op")/1e3, p.b("BenchmarkParseRequest", "allocs/op"))},
		{"added latency vs the floor, JSON", e2e("json")},
		{"same, SSE stream", e2e("stream")},
		{"same, JSON, more clients", fmt.Sprintf(
			"%.0f clients, median of %.0f rounds: **%.2f×** the floor's throughput (%.2f–%.2f; goal ≥ 0.9×), CPU %.1f vs %.1f µs (%.2f×)",
			p.t(lat, "json_sat_many_clients"), p.t(lat, "sat_rounds"), p.t(lat, "json_sat_many_ratio"),
			p.t(lat, "json_sat_many_ratio_min"), p.t(lat, "json_sat_many_ratio_max"),
			p.t(lat, "json_sat_many_cpu_ringgate_us"), p.t(lat, "json_sat_many_cpu_floor_us"), p.t(lat, "json_sat_many_cpu_ratio"))},
		{"hop to the owner, JSON p50", hopRow("json")},
		{"same, SSE p50", hopRow("stream")},
		{"snapshot encode / decode",
			fmt.Sprintf("%.2f µs / %.2f µs", p.b("BenchmarkEncode", "ns/op")/1e3, p.b("BenchmarkDecode", "ns/op")/1e3)},
		{"snapshot save per tenant",
			fmt.Sprintf("%.1f µs (100 a batch), %.1f µs (1 000)", p.b("BenchmarkSaveBatch/100", "µs/tenant"), p.b("BenchmarkSaveBatch/1000", "µs/tenant"))},
		{"handoff from Redis",
			fmt.Sprintf("%.0f µs for 1 tenant, %.2f ms for 100 (%.1f µs each)",
				p.b("BenchmarkHandoffTake/tenants=1", "ns/op")/1e3, p.b("BenchmarkHandoffTake/tenants=100", "ns/op")/1e6, p.b("BenchmarkHandoffTake/tenants=100", "µs/tenant"))},
	}
	return rows, p.err
}

// readmeBlock is what goes between the README's markers.
func readmeBlock(head, latency, acc string) string {
	var b strings.Builder
	b.WriteString(readmeBegin + "\n\n")
	b.WriteString(head)
	b.WriteString("\n" + latency + "\n" + acc)
	b.WriteString("\nAfter the kill -9, the dead node's tenants get less, never more. The 0 and 502 answers are calls cut with it.\n")
	b.WriteString("\n![admitted per window against the limit](docs/bench/accuracy.png)\n![latency against load](docs/bench/latency.png)\n")
	b.WriteString("\n" + readmeEnd)
	return b.String()
}

// rowsTable is the report's headline figures as a Markdown table.
func rowsTable(rows [][2]string) string {
	var b strings.Builder
	b.WriteString("| measured | figure |\n| --- | --- |\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s |\n", r[0], r[1])
	}
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
