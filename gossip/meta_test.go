package gossip

import (
	"slices"
	"strings"
	"testing"
)

func TestMetaRoundTrip(t *testing.T) {
	for _, s := range []State{StateActive, StateDraining} {
		b, err := encodeMeta(wireMeta{H: "10.1.2.3:8080", S: s, P: 0})
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 64 {
			t.Errorf("meta is %d bytes: %s", len(b), b)
		}
		m, err := decodeMeta(b)
		if err != nil || m.H != "10.1.2.3:8080" || m.S != s || m.P != 0 {
			t.Fatalf("decode(%s) = %+v %v", b, m, err)
		}
	}
	b := must(encodeMeta(wireMeta{H: "10.1.2.3:8080", S: StateActive, P: 1<<63 + 5, C: "3f2a9c01b7d4"}))
	if m, err := decodeMeta(b); err != nil || m.P != 1<<63+5 || m.C != "3f2a9c01b7d4" {
		t.Fatalf("decode(%s) = %+v %v, want the pins hash and the config version", b, m, err)
	}
	t.Logf("meta example: %s", b)
}

func TestMetaSizeLimit(t *testing.T) {
	if _, err := encodeMeta(wireMeta{H: strings.Repeat("a", 450), S: StateActive, P: 1<<64 - 1}); err != nil {
		t.Fatalf("450-byte address with a pins hash rejected: %v", err)
	}
	if _, err := encodeMeta(wireMeta{H: strings.Repeat("a", 500), S: StateDraining, P: 0}); err == nil {
		t.Fatal("meta over 512 bytes accepted")
	}
}

func TestDecodeMetaRejects(t *testing.T) {
	for _, b := range []string{
		"", "null", "{}", "[]", "\xff\xfe", `{"v":1}`, `{"v":1,"h":"x","s":"gone"}`,
		`{"v":"1","h":"x","s":"active"}`, `{"v":2,"h":"x","s":"active"}`, `{"v":1,"h":3,"s":"active"}`,
		strings.Repeat(" ", 600),
	} {
		if _, err := decodeMeta([]byte(b)); err == nil {
			t.Errorf("decodeMeta(%q) succeeded", b)
		}
	}
}

// FuzzDecodeMeta: no input may panic; whatever decodes must re-encode to
// something that decodes the same.
func FuzzDecodeMeta(f *testing.F) {
	f.Add([]byte(`{"v":1,"h":"10.0.0.1:8080","s":"active"}`))
	f.Add([]byte(`{"v":1,"h":"","s":"draining"}`))
	f.Add([]byte(`{"v":1,"h":"10.0.0.1:8080","s":"active","p":12345}`))
	f.Add([]byte(`{"v":1,"h":"10.0.0.1:8080","s":"active","p":12345,"c":"3f2a9c01b7d4"}`))
	f.Add([]byte(`{"v":1,"h":"10.0.0.1:8080","s":"active","u":[1,4294967295]}`))
	f.Add([]byte("\x00\x01\x02"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		b2, err := encodeMeta(m)
		if err != nil {
			return // decodable but an address too long to re-encode: fine
		}
		m2, err := decodeMeta(b2)
		if err != nil || m2.V != m.V || m2.H != m.H || m2.S != m.S || m2.P != m.P || m2.C != m.C || !slices.Equal(m2.U, m.U) {
			t.Fatalf("round trip %q -> %+v %v", b, m2, err)
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
