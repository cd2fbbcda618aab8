package spill

// Heat counts, for each tenant this node owns and serves itself, the ticks
// in a row its rate stayed above the threshold.
type Heat map[string]int

// Measure takes the tenant's arrivals over the last tick; it reports their
// rate and whether the tenant turns hot now (hotTicks in a row above
// threshold): then it spills.
func (h Heat) Measure(name string, arrivals int64, threshold float64) (rate float64, hot bool) {
	rate = float64(arrivals) / Tick.Seconds()
	if rate < threshold {
		delete(h, name)
		return rate, false
	}
	if h[name]++; h[name] >= hotTicks {
		delete(h, name)
		return rate, true
	}
	return rate, false
}

// Cooling counts the ticks in a row a spill's cluster-wide rate stayed
// below half the threshold.
type Cooling int

// Cooled takes the cluster's arrivals over the last tick; it reports
// whether the spill ends now (coolTicks in a row below half of
// threshold).
func (c *Cooling) Cooled(arrivals int64, threshold int) bool {
	rate := float64(arrivals) / Tick.Seconds()
	if rate < float64(threshold)/2 {
		*c++
	} else {
		*c = 0
	}
	return *c >= coolTicks
}

// Lapse is why this node, a member of sp, leaves it now: its owner went
// silent, or ringOwner, the owner its ring names, is another; "" while it
// stays, or once it is leaving (abandoned).
func (n *Node) Lapse(sp *Spill, ringOwner func() string) string {
	switch u := sp.until.Load(); {
	case u == abandonedUntil:
		return "" // the abandon is leaving it
	case n.now() > u:
		return "owner_silent"
	case ringOwner() != sp.Owner:
		return "owner_changed"
	}
	return ""
}
