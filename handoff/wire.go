package handoff

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ringgate/ringgate/snapshot"
)

// The peer wire format of a Fetch answer, version 1:
//
//	"RGH" version:byte uvarint count
//	count replies: status:byte, uvarint len + tenant,
//	  Handed: uvarint len + the state as a final snapshot (snapshot format)
//	  Moved:  uvarint len + the node it went to
//
// The state travels in the same versioned binary format as the store's
// snapshots, so both paths share one encoder, one decoder and one fuzz
// target.
const wireMagic = "RGH"

const wireVersion = 1

// maxReplies bounds a decoded answer.
const maxReplies = 1 << 20

// ErrWire marks an answer that does not decode.
var ErrWire = errors.New("handoff: malformed peer answer")

// EncodeReplies appends the wire form of replies, as written by node
// writer, to b.
func EncodeReplies(b []byte, writer string, writtenAt int64, replies []Reply) []byte {
	b = append(b, wireMagic...)
	b = append(b, wireVersion)
	b = binary.AppendUvarint(b, uint64(len(replies)))
	for _, r := range replies {
		b = append(b, byte(r.Status))
		b = appendString(b, r.Tenant)
		switch r.Status {
		case Handed:
			snap := snapshot.Encode(nil, &snapshot.Snapshot{Tenant: r.Tenant, Writer: writer, WrittenAt: writtenAt, Final: true, State: r.State})
			b = binary.AppendUvarint(b, uint64(len(snap)))
			b = append(b, snap...)
		case Moved:
			b = appendString(b, r.To)
		}
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// DecodeReplies parses a Fetch answer.
func DecodeReplies(b []byte) ([]Reply, error) {
	if len(b) < len(wireMagic)+1 || string(b[:len(wireMagic)]) != wireMagic {
		return nil, fmt.Errorf("%w: no magic", ErrWire)
	}
	if b[len(wireMagic)] != wireVersion {
		return nil, fmt.Errorf("%w: version %d", ErrWire, b[len(wireMagic)])
	}
	b = b[len(wireMagic)+1:]
	n, b, err := uvarint(b)
	if err != nil || n > maxReplies {
		return nil, fmt.Errorf("%w: count", ErrWire)
	}
	out := make([]Reply, 0, min(n, 1024))
	for range n {
		if len(b) == 0 {
			return nil, fmt.Errorf("%w: truncated", ErrWire)
		}
		r := Reply{Status: Status(b[0])}
		b = b[1:]
		var name []byte
		if name, b, err = bytesOf(b, snapshot.MaxNameLen); err != nil {
			return nil, err
		}
		r.Tenant = string(name)
		switch r.Status {
		case Handed:
			var raw []byte
			if raw, b, err = bytesOf(b, len(b)); err != nil {
				return nil, err
			}
			s, err := snapshot.Decode(raw)
			if err != nil {
				return nil, fmt.Errorf("%w: state of %.64q: %w", ErrWire, r.Tenant, err)
			}
			if s.Tenant != r.Tenant {
				return nil, fmt.Errorf("%w: state of %.64q under %.64q", ErrWire, s.Tenant, r.Tenant)
			}
			r.State = s.State
		case Moved:
			var to []byte
			if to, b, err = bytesOf(b, snapshot.MaxNameLen); err != nil {
				return nil, err
			}
			r.To = string(to)
		case NotHere, Busy:
		default:
			return nil, fmt.Errorf("%w: status %d", ErrWire, r.Status)
		}
		out = append(out, r)
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrWire, len(b))
	}
	return out, nil
}

func uvarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, fmt.Errorf("%w: bad varint", ErrWire)
	}
	return v, b[n:], nil
}

func bytesOf(b []byte, limit int) ([]byte, []byte, error) {
	n, b, err := uvarint(b)
	if err != nil {
		return nil, nil, err
	}
	if n > uint64(limit) || n > uint64(len(b)) {
		return nil, nil, fmt.Errorf("%w: length %d", ErrWire, n)
	}
	return b[:n], b[n:], nil
}
