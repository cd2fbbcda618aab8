package gossip

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hashicorp/memberlist"
)

// metaVersion is the version of the node metadata encoding. A member whose
// metadata carries another version is treated as an unknown member.
const metaVersion = 1

// wireMeta is the node metadata gossiped with every alive message. JSON with
// one-letter keys: compact (about 50 bytes for a typical address), easy to
// read in a packet dump, and decoding arbitrary bytes cannot panic.
type wireMeta struct {
	V int    `json:"v"`
	H string `json:"h"` // HTTP address
	S State  `json:"s"` // state
	// P is the hash of the placement the member's config asks for
	// (Config.Pins); absent (0) from a member that has none or predates
	// it.
	P uint64 `json:"p,omitempty"`
	// C is the version of the member's config file (Config.ConfigVersion);
	// absent from a member that has none or predates it.
	C string `json:"c,omitempty"`
	// U names, by NameHash, the members this one cannot reach over HTTP
	// and admits fallback shares for (at most MaxCannotReach).
	U []uint32 `json:"u,omitempty"`
}

// MaxCannotReach bounds the members a node's metadata says it cannot
// reach (the metadata has 512 bytes in all).
const MaxCannotReach = 16

// NameHash is how the metadata names a member it cannot reach: FNV-1a of
// its name (a collision only makes an owner keep to a smaller share).
func NameHash(name string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(name); i++ {
		h ^= uint32(name[i])
		h *= 16777619
	}
	return h
}

var errBadMeta = errors.New("gossip: invalid member metadata")

// encodeMeta encodes the metadata and checks memberlist's size limit.
func encodeMeta(m wireMeta) ([]byte, error) {
	m.V = metaVersion
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("gossip: node metadata is %d bytes, limit is %d (HTTPAddr too long?)", len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

// decodeMeta decodes metadata received from the network. Any input, however
// malformed, returns an error rather than panicking.
func decodeMeta(b []byte) (wireMeta, error) {
	if len(b) == 0 || len(b) > memberlist.MetaMaxSize {
		return wireMeta{}, errBadMeta
	}
	var m wireMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return wireMeta{}, fmt.Errorf("%w: %v", errBadMeta, err)
	}
	if m.V != metaVersion {
		return wireMeta{}, fmt.Errorf("%w: version %d", errBadMeta, m.V)
	}
	if !m.S.valid() {
		return wireMeta{}, fmt.Errorf("%w: state %q", errBadMeta, m.S)
	}
	return m, nil
}
