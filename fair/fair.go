// Package fair divides a capacity among the flows that want it: max-min
// fair by weight, in priority bands. It is Doorman's FairShare: every flow
// reports what it wants; a flow wanting less than its weight's share of
// what is left gets all it wants, and the rest is split among the others
// by weight, until the capacity is used or every want is met.
//
// Band 0 (interactive) is divided first. Band 1 (batch) gets what band 0
// leaves, and never less than Floor of the capacity while it wants that
// much: the same rule a node's queue applies to its own line, so batch is
// never starved and interactive goes first across a cluster as on a node.
//
// A node reports its flows as a handful of groups (Merge): flows whose
// levels (want per weight) are close are added together, so a report has
// a bounded size whatever the number of tenants, and the division of the
// groups is the division of the flows for all flows whose level is not
// near the water's.
//
// The package is arithmetic: it knows nothing of nodes, stores, tenants or
// limits' windows.
package fair

import (
	"math"
	"slices"
)

// Bands is the number of priority bands: 0 (interactive), 1 (batch).
const Bands = 2

// Want is what one flow, or a group of flows, would use of a capacity: per
// window for a rate, at once for slots.
type Want struct {
	Band   int
	Weight float64 // > 0
	Amount float64 // >= 0
}

// level is the water level at which the want is met.
func (w Want) level() float64 { return w.Amount / w.Weight }

// valid reports whether w can be divided: a known band, a positive finite
// weight and a finite amount that is not negative.
func (w Want) valid() bool {
	return w.Band >= 0 && w.Band < Bands && w.Weight > 0 && !math.IsInf(w.Weight, 0) &&
		w.Amount >= 0 && !math.IsInf(w.Amount, 0) && !math.IsNaN(w.Amount)
}

// Division is a capacity divided among wants.
type Division struct {
	// Level is each band's water: a want of weight w in band b gets
	// min(Amount, Level[b]*w). +Inf: every want of the band is met.
	Level [Bands]float64
	// Spare is the capacity left once every want is met; Weight is the
	// wants' total weight, over which the spare is split (Spare).
	Spare, Weight float64
}

// Divide divides capacity among wants. floor is the least part of the
// capacity band 1 gets while it wants it (0 to 1). Invalid wants are
// ignored.
func Divide(capacity, floor float64, wants []Want) Division {
	var d Division
	var byBand [Bands][]Want
	var demand [Bands]float64
	for _, w := range wants {
		if !w.valid() {
			continue
		}
		byBand[w.Band] = append(byBand[w.Band], w)
		demand[w.Band] += w.Amount
		d.Weight += w.Weight
	}
	capacity = max(0, capacity)
	reserved := min(demand[1], max(0, min(1, floor))*capacity)
	var used0, used1 float64
	d.Level[0], used0 = fill(capacity-reserved, byBand[0])
	d.Level[1], used1 = fill(capacity-used0, byBand[1])
	d.Spare = max(0, capacity-used0-used1)
	return d
}

// fill finds the water level that divides capacity among wants, and what
// the wants take at it.
func fill(capacity float64, wants []Want) (level, used float64) {
	slices.SortFunc(wants, func(a, b Want) int {
		la, lb := a.level(), b.level()
		switch {
		case la < lb:
			return -1
		case la > lb:
			return 1
		}
		return 0
	})
	var weight float64
	for _, w := range wants {
		weight += w.Weight
	}
	left := max(0, capacity)
	for i, w := range wants {
		if w.level()*weight <= left {
			left -= w.Amount
			used += w.Amount
			weight -= w.Weight
			continue
		}
		level = left / weight
		for _, r := range wants[i:] {
			used += level * r.Weight
		}
		return level, used
	}
	return math.Inf(1), used
}

// Share is what want gets of the division, the spare left out.
func (d *Division) Share(w Want) float64 {
	if !w.valid() {
		return 0
	}
	return min(w.Amount, d.Level[w.Band]*w.Weight)
}

// SpareFor is the part of the spare capacity a holder of wants of weight
// weight gets: shared by weight, so that a want that grows before the next
// division finds some room.
func (d *Division) SpareFor(weight float64) float64 {
	if d.Weight <= 0 || weight <= 0 {
		return 0
	}
	return d.Spare * weight / d.Weight
}

// Merge returns wants in at most n groups per band: flows of a band whose
// levels are closest are added together, two neighbours at a time, so a
// group's levels are as near one another as n groups allow and a flow far
// from the others keeps a group of its own. With at most n wants in a band
// they are returned as they are. Invalid wants are dropped.
func Merge(wants []Want, n int) []Want {
	n = max(1, n)
	var out []Want
	for band := range Bands {
		var in []Want
		for _, w := range wants {
			if w.valid() && w.Band == band {
				in = append(in, w)
			}
		}
		if len(in) <= n {
			out = append(out, in...)
			continue
		}
		out = append(out, merge(in, n)...)
	}
	return out
}

// mergeFine is how many groups merge makes by level first, on a log scale,
// before it joins the closest neighbours: thousands of flows cost a pass,
// and flows in one fine group differ in level by a small factor.
const mergeFine = 256

// merge groups wants of one band into at most n by their level.
func merge(in []Want, n int) []Want {
	groups := fine(in)
	for len(groups) > n {
		// Join the two neighbours whose levels are closest (the wants of
		// nothing, level 0, first with each other).
		best, ratio := 0, math.Inf(1)
		for i := 0; i+1 < len(groups); i++ {
			a, b := groups[i].level(), groups[i+1].level()
			r := math.Inf(1)
			switch {
			case a == 0 && b == 0:
				r = 0
			case a > 0:
				r = b / a
			}
			if r < ratio {
				best, ratio = i, r
			}
		}
		groups[best].Weight += groups[best+1].Weight
		groups[best].Amount += groups[best+1].Amount
		groups = append(groups[:best+1], groups[best+2:]...)
	}
	return groups
}

// fine groups wants of one band by level: those of level 0 together, the
// others in at most mergeFine groups evenly spread on a log scale between
// the lowest level and the highest; in order of level.
func fine(in []Want) []Want {
	lo, hi := math.Inf(1), 0.0
	for _, w := range in {
		if l := w.level(); l > 0 {
			lo, hi = min(lo, l), max(hi, l)
		}
	}
	span := math.Log(hi) - math.Log(lo)
	groups := make([]Want, mergeFine+1)
	for _, w := range in {
		i := 0 // the wants of nothing
		if l := w.level(); l > 0 {
			i = 1
			if span > 0 {
				i = 1 + int(float64(mergeFine-1)*(math.Log(l)-math.Log(lo))/span)
			}
		}
		groups[i].Weight += w.Weight
		groups[i].Amount += w.Amount
	}
	out := groups[:0]
	for _, g := range groups {
		if g.Weight > 0 {
			g.Band = in[0].Band
			out = append(out, g)
		}
	}
	return out
}
