package gossip

import (
	"strings"
	"testing"
)

func TestMetaRoundTrip(t *testing.T) {
	for _, s := range []State{StateActive, StateDraining} {
		b, err := encodeMeta("10.1.2.3:8080", s)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 64 {
			t.Errorf("meta is %d bytes: %s", len(b), b)
		}
		h, got, err := decodeMeta(b)
		if err != nil || h != "10.1.2.3:8080" || got != s {
			t.Fatalf("decode(%s) = %q %q %v", b, h, got, err)
		}
	}
	t.Logf("meta example: %s", must(encodeMeta("10.1.2.3:8080", StateActive)))
}

func TestMetaSizeLimit(t *testing.T) {
	if _, err := encodeMeta(strings.Repeat("a", 480), StateActive); err != nil {
		t.Fatalf("480-byte address rejected: %v", err)
	}
	if _, err := encodeMeta(strings.Repeat("a", 500), StateDraining); err == nil {
		t.Fatal("meta over 512 bytes accepted")
	}
}

func TestDecodeMetaRejects(t *testing.T) {
	for _, b := range []string{
		"", "null", "{}", "[]", "\xff\xfe", `{"v":1}`, `{"v":1,"h":"x","s":"gone"}`,
		`{"v":"1","h":"x","s":"active"}`, `{"v":2,"h":"x","s":"active"}`, `{"v":1,"h":3,"s":"active"}`,
		strings.Repeat(" ", 600),
	} {
		if _, _, err := decodeMeta([]byte(b)); err == nil {
			t.Errorf("decodeMeta(%q) succeeded", b)
		}
	}
}

// FuzzDecodeMeta: no input may panic; whatever decodes must re-encode to
// something that decodes the same.
func FuzzDecodeMeta(f *testing.F) {
	f.Add([]byte(`{"v":1,"h":"10.0.0.1:8080","s":"active"}`))
	f.Add([]byte(`{"v":1,"h":"","s":"draining"}`))
	f.Add([]byte("\x00\x01\x02"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, s, err := decodeMeta(b)
		if err != nil {
			return
		}
		b2, err := encodeMeta(h, s)
		if err != nil {
			return // decodable but an address too long to re-encode: fine
		}
		h2, s2, err := decodeMeta(b2)
		if err != nil || h2 != h || s2 != s {
			t.Fatalf("round trip %q -> %q %q %v", b, h2, s2, err)
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
