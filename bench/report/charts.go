package main

import (
	"fmt"
	"image/color"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/ringgate/ringgate/internal/audit"
)

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, // red
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // green
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, // purple
	color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}, // grey
}

// drawAccuracy draws, for each limiting system, what tenant t0's sliding
// window held at the provider every 100 ms of the run, against its limit,
// with the scenario's events marked.
func drawAccuracy(path string, acc []accuracy, d time.Duration) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Tenant t0 at the provider: requests in the last %v (limit %d), load at 2x", window, tenantLimit)
	p.X.Label.Text = "seconds into the run"
	p.Y.Label.Text = "requests in the sliding window"
	for i, a := range acc {
		var pts plotter.XYs
		for t := window; t <= d; t += 100 * time.Millisecond {
			end := a.start.Add(t)
			n := audit.CountIn(a.arrivals[0], end.Add(-window), end)
			pts = append(pts, plotter.XY{X: t.Seconds(), Y: float64(n)})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color, l.Width = palette[i], vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(a.name, l)
	}
	limit, err := plotter.NewLine(plotter.XYs{{X: 0, Y: tenantLimit}, {X: d.Seconds(), Y: tenantLimit}})
	if err != nil {
		return err
	}
	limit.Color, limit.Dashes = color.Black, []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(limit)
	p.Legend.Add("limit", limit)
	if len(acc) > 0 {
		for _, e := range acc[0].events {
			mark, err := plotter.NewLine(plotter.XYs{{X: e.at.Seconds(), Y: 0}, {X: e.at.Seconds(), Y: tenantLimit * 2.2}})
			if err != nil {
				return err
			}
			mark.Color, mark.Dashes = palette[4], []vg.Length{vg.Points(2), vg.Points(2)}
			p.Add(mark)
			lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: e.at.Seconds(), Y: tenantLimit * 2.2}}, Labels: []string{e.what}})
			if err != nil {
				return err
			}
			p.Add(lbl)
		}
	}
	p.Y.Min, p.Y.Max = 0, tenantLimit*2.4
	p.Legend.Top, p.Legend.Left = true, true
	return p.Save(10*vg.Inch, 5*vg.Inch, path)
}

// drawLatency draws p50 and p99 added latency against offered load for
// every target.
func drawLatency(path string, rows []latencyRow, rates []int) error {
	p := plot.New()
	p.Title.Text = "Latency against offered load (open loop, loopback): p50 solid, p99 dashed"
	p.X.Label.Text = "offered requests per second"
	p.Y.Label.Text = "latency (ms)"
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{}
	for i, r := range rows {
		for _, q := range []struct {
			name   string
			of     map[int]time.Duration
			dashed bool
		}{{"p50", r.p50, false}, {"p99", r.p99, true}} {
			var pts plotter.XYs
			for _, rate := range rates {
				if v := q.of[rate]; v > 0 {
					pts = append(pts, plotter.XY{X: float64(rate), Y: float64(v.Microseconds()) / 1000})
				}
			}
			if len(pts) == 0 {
				continue
			}
			l, s, err := plotter.NewLinePoints(pts)
			if err != nil {
				return err
			}
			l.Color, s.Color, s.Shape = palette[i], palette[i], draw.CircleGlyph{}
			if q.dashed {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			} else {
				p.Legend.Add(r.name, l, s)
			}
			p.Add(l, s)
		}
	}
	p.Legend.Top, p.Legend.Left = true, true
	return p.Save(10*vg.Inch, 5*vg.Inch, path)
}
