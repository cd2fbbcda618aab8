package reserve

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// window on random texts of mixed widths, cut anywhere: it lies in its
// text, starts on a rune and is never empty.
func TestWindowBounds(t *testing.T) {
	runes := []string{"a", " ", "é", "中", "😀", "\x01"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var b strings.Builder
		for range rng.IntN(80) {
			b.WriteString(runes[rng.IntN(len(runes))])
		}
		text := b.String()
		if text == "" {
			continue
		}
		at, n := rng.IntN(len(text)), 1+rng.IntN(40)
		w := window(text, at, n)
		lo := strings.Index(text[max(0, at-4):], w) + max(0, at-4)
		if w == "" || lo < 0 || !utf8.RuneStart(w[0]) || len(w) > max(n, 4) {
			t.Fatalf("window(%q, %d, %d) = %q", text, at, n, w)
		}
	}
}
