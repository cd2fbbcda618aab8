package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ringgate/ringgate/limiter"
)

// Snapshot is a tenant's limiter state as its owner wrote it.
type Snapshot struct {
	Tenant    string
	Writer    string // node that wrote it
	WrittenAt int64  // Unix ns
	RingHash  uint64 // identity of the writer's ring (member set) when written
	Final     bool   // written at a handoff: the writer stopped admitting this tenant
	State     limiter.State
}

// Format limits. Decode rejects what exceeds them; Validate tells a writer
// beforehand. A window has at most 129 non-empty buckets.
const (
	MaxNameLen = 256  // bytes of Tenant and of Writer
	MaxBuckets = 4096 // buckets per window
	// MaxValue bounds a bucket's charge, so that no sum of buckets from a
	// damaged or hostile value can overflow a window's total (2^50 tokens
	// is far beyond any limit).
	MaxValue = 1 << 50
)

// Version is the format version Encode writes; Decode also reads version 1
// (no slots away).
const Version = 2

// MaxAway bounds the nodes a snapshot lists slots for.
const MaxAway = 1024

// Encoding, version 1 (varint = encoding/binary Uvarint, svarint = zig-zag
// Varint, fixed64 = 8 bytes little-endian):
//
//	"RGS" version:byte flags:byte       flags bit 0: Final; other bits must be 0
//	uvarint len, Tenant bytes
//	uvarint len, Writer bytes
//	fixed64 WrittenAt, fixed64 RingHash
//	3 windows (Requests, Tokens, Slots), each:
//	  svarint Width, svarint Head, uvarint n,
//	  n buckets: uvarint gap, svarint Value
//	version 2 only: uvarint m, m times: uvarint len, node name, window
//	  (State.Away: the slots of calls running on other nodes)
//
// Decode sets State.Holder to the Writer: the Slots window is the writer's
// own calls.
//
// A bucket's gap is its distance (two's-complement, wrapping) from the
// previous bucket's index, and the first bucket's from Head counted
// backwards: for buckets oldest first inside the window each gap is 1..129,
// one or two bytes, so a bucket costs 2–4 bytes.
const magic = "RGS"

const flagFinal = 1

// Errors of Decode; it wraps them with details.
var (
	ErrFormat  = errors.New("snapshot: malformed encoding")
	ErrVersion = errors.New("snapshot: unknown format version")
)

// Validate reports whether s fits the format's limits: a non-empty tenant
// and names, bucket counts and values within MaxNameLen, MaxBuckets and
// MaxValue. Encode does
// not check; Decode rejects what Validate rejects.
func (s *Snapshot) Validate() error {
	switch {
	case s.Tenant == "":
		return fmt.Errorf("%w: empty tenant", ErrFormat)
	case len(s.Tenant) > MaxNameLen:
		return fmt.Errorf("%w: tenant name of %d bytes (max %d)", ErrFormat, len(s.Tenant), MaxNameLen)
	case len(s.Writer) > MaxNameLen:
		return fmt.Errorf("%w: writer name of %d bytes (max %d)", ErrFormat, len(s.Writer), MaxNameLen)
	}
	if len(s.State.Away) > MaxAway {
		return fmt.Errorf("%w: slots on %d nodes (max %d)", ErrFormat, len(s.State.Away), MaxAway)
	}
	ws := []*limiter.WindowState{&s.State.Requests, &s.State.Tokens, &s.State.Slots}
	for i := range s.State.Away {
		if n := len(s.State.Away[i].Node); n > MaxNameLen {
			return fmt.Errorf("%w: node name of %d bytes (max %d)", ErrFormat, n, MaxNameLen)
		}
		ws = append(ws, &s.State.Away[i].Slots)
	}
	for _, w := range ws {
		if len(w.Buckets) > MaxBuckets {
			return fmt.Errorf("%w: %d buckets in a window (max %d)", ErrFormat, len(w.Buckets), MaxBuckets)
		}
		for _, b := range w.Buckets {
			if b.Value < 0 || b.Value > MaxValue {
				return fmt.Errorf("%w: bucket value %d out of range 0..%d", ErrFormat, b.Value, int64(MaxValue))
			}
		}
	}
	return nil
}

// Encode appends the encoding of s to dst and returns the extended slice.
func Encode(dst []byte, s *Snapshot) []byte {
	var flags byte
	if s.Final {
		flags |= flagFinal
	}
	dst = append(dst, magic...)
	dst = append(dst, Version, flags)
	dst = binary.AppendUvarint(dst, uint64(len(s.Tenant)))
	dst = append(dst, s.Tenant...)
	dst = binary.AppendUvarint(dst, uint64(len(s.Writer)))
	dst = append(dst, s.Writer...)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(s.WrittenAt))
	dst = binary.LittleEndian.AppendUint64(dst, s.RingHash)
	dst = appendWindow(dst, &s.State.Requests)
	dst = appendWindow(dst, &s.State.Tokens)
	dst = appendWindow(dst, &s.State.Slots)
	dst = binary.AppendUvarint(dst, uint64(len(s.State.Away)))
	for i := range s.State.Away {
		a := &s.State.Away[i]
		dst = binary.AppendUvarint(dst, uint64(len(a.Node)))
		dst = append(dst, a.Node...)
		dst = appendWindow(dst, &a.Slots)
	}
	return dst
}

func appendWindow(dst []byte, w *limiter.WindowState) []byte {
	dst = binary.AppendVarint(dst, w.Width)
	dst = binary.AppendVarint(dst, w.Head)
	dst = binary.AppendUvarint(dst, uint64(len(w.Buckets)))
	prev := w.Head
	for i, b := range w.Buckets {
		var gap uint64
		if i == 0 {
			gap = uint64(w.Head - b.Index)
		} else {
			gap = uint64(b.Index - prev)
		}
		prev = b.Index
		dst = binary.AppendUvarint(dst, gap)
		dst = binary.AppendVarint(dst, b.Value)
	}
	return dst
}

// Decode parses an encoding made by Encode. It never panics, bounds every
// length before allocating, and rejects unknown versions (ErrVersion),
// truncated or trailing bytes and anything over the format's limits
// (ErrFormat). A window without buckets decodes with nil Buckets.
func Decode(b []byte) (Snapshot, error) {
	var s Snapshot
	if len(b) < len(magic)+2 || string(b[:len(magic)]) != magic {
		return s, fmt.Errorf("%w: no %q header", ErrFormat, magic)
	}
	v := b[len(magic)]
	if v != 1 && v != Version {
		return s, fmt.Errorf("%w: %d (this build reads 1 and %d)", ErrVersion, v, Version)
	}
	flags := b[len(magic)+1]
	if flags&^flagFinal != 0 {
		return s, fmt.Errorf("%w: unknown flags %#x", ErrFormat, flags)
	}
	s.Final = flags&flagFinal != 0
	d := decoder{b: b[len(magic)+2:]}
	s.Tenant = d.name("tenant")
	s.Writer = d.name("writer")
	s.WrittenAt = int64(d.fixed64("written-at"))
	s.RingHash = d.fixed64("ring hash")
	d.window(&s.State.Requests, "requests")
	d.window(&s.State.Tokens, "tokens")
	d.window(&s.State.Slots, "slots")
	if v >= 2 {
		n := d.uvarint("away", "count")
		if d.err == nil && (n > MaxAway || n > uint64(len(d.b))/4) {
			d.fail("%d nodes away (max %d)", n, MaxAway)
		}
		for i := uint64(0); i < n && d.err == nil; i++ {
			var a limiter.NodeSlots
			a.Node = d.name("away node")
			d.window(&a.Slots, "away slots")
			s.State.Away = append(s.State.Away, a)
		}
	}
	s.State.Holder = s.Writer
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err == nil && s.Tenant == "" {
		d.fail("empty tenant")
	}
	if d.err != nil {
		return Snapshot{}, d.err
	}
	return s, nil
}

// decoder consumes b; after the first error every read returns zero.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrFormat}, args...)...)
	}
}

// The field names of the read functions are two strings, joined only in an
// error: no allocation on the way.

func (d *decoder) uvarint(what, field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad %s %s", what, field)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint(what, field string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad %s %s", what, field)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) fixed64(what string) uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail("truncated %s", what)
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) name(what string) string {
	n := d.uvarint(what, "name length")
	if d.err != nil {
		return ""
	}
	if n > MaxNameLen {
		d.fail("%s name of %d bytes (max %d)", what, n, MaxNameLen)
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail("truncated %s name", what)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) window(w *limiter.WindowState, what string) {
	w.Width = d.varint(what, "width")
	w.Head = d.varint(what, "head")
	n := d.uvarint(what, "bucket count")
	if d.err != nil {
		return
	}
	if n > MaxBuckets {
		d.fail("%d %s buckets (max %d)", n, what, MaxBuckets)
		return
	}
	// Every bucket takes at least two bytes: never allocate for more
	// buckets than the input can hold.
	if n > uint64(len(d.b))/2 {
		d.fail("truncated %s buckets", what)
		return
	}
	if n == 0 {
		return
	}
	w.Buckets = make([]limiter.Bucket, n)
	prev := w.Head
	for i := range w.Buckets {
		gap := int64(d.uvarint(what, "bucket index"))
		v := d.varint(what, "bucket value")
		if d.err == nil && (v < 0 || v > MaxValue) {
			d.fail("%s bucket value %d out of range 0..%d", what, v, int64(MaxValue))
		}
		if d.err != nil {
			w.Buckets = nil
			return
		}
		if i == 0 {
			prev = w.Head - gap
		} else {
			prev += gap
		}
		w.Buckets[i] = limiter.Bucket{Index: prev, Value: v}
	}
}
