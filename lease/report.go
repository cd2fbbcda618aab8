package lease

import (
	"encoding/binary"
	"math"

	"github.com/ringgate/ringgate/fair"
)

// A demand report on the wire (the store keeps it as it is): a version
// byte, then for requests, tokens and slots in turn the number of groups
// (a uvarint) and each group's band (a byte), weight and amount (float64,
// little-endian).

const (
	reportVersion = 1
	// maxReportGroups bounds what a report may hold a dimension: a band's
	// reportGroups, for each band.
	maxReportGroups = reportGroups * fair.Bands
)

func encodeReport(w [3][]fair.Want) []byte {
	out := make([]byte, 0, 1+3*(1+len(w[0])*17))
	out = append(out, reportVersion)
	for _, ws := range w {
		out = binary.AppendUvarint(out, uint64(len(ws)))
		for _, x := range ws {
			out = append(out, byte(x.Band))
			out = binary.LittleEndian.AppendUint64(out, math.Float64bits(x.Weight))
			out = binary.LittleEndian.AppendUint64(out, math.Float64bits(x.Amount))
		}
	}
	return out
}

// decodeReport reads a report; ok is false for one it cannot read whole (a
// newer version, a damaged one), which counts as no report. Groups that
// could not be divided (a bad weight or amount) are dropped.
func decodeReport(b []byte) (w [3][]fair.Want, ok bool) {
	if len(b) == 0 || b[0] != reportVersion {
		return w, false
	}
	b = b[1:]
	for d := range w {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > maxReportGroups || uint64(len(b)-k) < n*17 {
			return [3][]fair.Want{}, false
		}
		b = b[k:]
		for range n {
			x := fair.Want{Band: int(b[0]),
				Weight: math.Float64frombits(binary.LittleEndian.Uint64(b[1:])),
				Amount: math.Float64frombits(binary.LittleEndian.Uint64(b[9:]))}
			b = b[17:]
			if x.Band < fair.Bands && x.Weight > 0 && x.Weight <= math.MaxFloat64 && x.Amount >= 0 && x.Amount <= math.MaxFloat64 {
				w[d] = append(w[d], x)
			}
		}
	}
	return w, len(b) == 0
}
