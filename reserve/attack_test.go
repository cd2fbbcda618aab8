package reserve

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// forgedPiece is one piece (a space and 1039 lowercase letters, a single
// piece in both encodings) whose XXH64 agrees with that of " the" in every
// bit the piece table compared when it was keyed by XXH64: the 16 slot
// bits and the 44 tag bits (bits 16-19 are in neither). Found by a
// reviewer. XXH64 is not a keyed or collision-resistant hash,
// and every step after the last 8-byte lane is invertible, so such a piece is
// found by inverting the hash from the target and trying 8-byte lanes until
// the computed last lane is all lowercase letters: about 16 million tries,
// under 2 s on one core (the last 16 bytes, "mokpjkzc" and "zacdbfox", were
// found that way; the first 1024 bytes are arbitrary). The seed o200k_base's
// hashes are XORed with is public, so the piece collides in both encodings.
func forgedPiece() string {
	rng := rand.New(rand.NewPCG(11, 12))
	var b strings.Builder
	b.WriteByte(' ')
	for b.Len() < 1024 {
		b.WriteByte(byte('a' + rng.IntN(26)))
	}
	return b.String() + "mokpjkzc" + "zacdbfox"
}

// checkForged: forged collides with target under XXH64, as the attack needs.
func checkForged(t *testing.T, forged, target string) {
	t.Helper()
	f, g := xxhash.Sum64String(forged), xxhash.Sum64String(target)
	if f>>countBits != g>>countBits || f&(pieceSlots-1) != g&(pieceSlots-1) {
		t.Fatalf("not a collision: %x %x", f, g)
	}
	if n := len(scannerPieces(cl100kPiece, forged)); n != 1 {
		t.Fatalf("cl100k: %d pieces", n)
	}
	if n := len(scannerPieces(o200kPiece, forged)); n != 1 {
		t.Fatalf("o200k: %d pieces", n)
	}
}

// A client-chosen piece that collides with a word every prompt holds was
// counted as that word when the table was keyed by XXH64, which anyone can
// compute: the forged piece of 1 040 bytes counted 1 token (the library:
// 566 with cl100k_base, 542 with o200k_base), and nothing bounded the
// length of a piece given a short one's count. Its count is the library's
// now (hashSeed).
func TestForgedPieceCountedAsItself(t *testing.T) {
	forged := forgedPiece()
	checkForged(t, forged, " the")
	for _, wide := range []bool{false, true} {
		codec, err := codecFor(wide)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := codec.Count(forged)
		count(" the", wide) // any prose does this
		if got := count(forged, wide); got != want {
			t.Errorf("o200k %v: a %d-byte piece colliding with \" the\" under XXH64 counts %d tokens, the library %d", wide, len(forged), got, want)
		}
	}
}

// The table is the process's, so one tenant could set the count every
// other tenant's prompts get for a common word: a piece sharing only
// " the"'s slot under XXH64 (65 000 tries) evicted it, then the forged
// piece, a miss, stored the library's count of itself (566) under " the"'s
// tag: an English prompt of 1 KiB was counted some 22 000 tokens. Found by
// a reviewer.
func TestPieceTableNotPoisonedByForgedPiece(t *testing.T) {
	forged := forgedPiece()
	checkForged(t, forged, " the")
	target := xxhash.Sum64String(" the")
	slot := target & (pieceSlots - 1)
	var evict string
	for i := 0; ; i++ {
		var b strings.Builder
		b.WriteString(" zq")
		for n := i; n > 0; n /= 26 {
			b.WriteByte(byte('a' + n%26))
		}
		if h := xxhash.Sum64String(b.String()); h&(pieceSlots-1) == slot && h>>countBits != target>>countBits {
			evict = b.String()
			break
		}
	}
	count(evict, false) // the attacker's pieces
	count(forged, false)
	if got := count(" the", false); got != 1 {
		t.Errorf(`count(" the") = %d after one client's request, want 1`, got)
	}
	tok := newTokenizer(t)
	text := "Summarise the report on the state of the art in the field."
	codec, err := codecFor(false)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := codec.Count(text)
	if got := tok.Count("claude-3-5-sonnet", text); got != want {
		t.Errorf("another tenant's %q: %d tokens, the library %d", text, got, want)
	}
}

// The probe's windows, each place enumerated.
type windowCount struct{ tokens, bytes int }

func windowsAt(text string, lo, hi int, wide bool) []windowCount {
	var ws []windowCount
	for at := lo; at < hi; at++ {
		w := probeWindow(text, at)
		ws = append(ws, windowCount{count(w, wide), len(w)})
	}
	return ws
}

// probeCaught is the probability that probe's ratio over two windows, each
// at an independent uniform place among ws, is over tau.
func probeCaught(ws []windowCount, tau float64) float64 {
	caught := 0
	for _, a := range ws {
		for _, b := range ws {
			if float64(a.tokens+b.tokens)/float64(a.bytes+b.bytes) > tau {
				caught++
			}
		}
	}
	return float64(caught) / float64(len(ws)*len(ws))
}

// TestProbeCatchesDenseWordsBetweenShortSparseWords: windows moved to the
// words' edges (to find their pieces counted before) could be steered; the
// windows fall where they fall (window). Found by a reviewer. Input: 32-byte dense words (" " + 31 random printable ASCII
// characters, no space) each followed by a 16-byte sparse word
// (" ==============="), repeated: 0.534 tokens a byte with cl100k_base,
// 2.7 times the Latin floor, 2/3 of the bytes dense. A window whose place
// is over 16 bytes into a dense word starts at that place and is then cut
// "before the last space in its second half", i.e. right after the sparse
// word that follows: mostly sparse; a window in the sparse word is the
// sparse word alone. With the learned ratio at the floor (0.2; a tenant
// teaches it with one sparse prompt), the probe catches the prompt
// (2 windows over 2 x 0.2) with probability 0.99 with the windows at
// uniform places, and was 0.60 with the windows at the words' edges, so
// 40 % of such prompts were reserved at 0.2 tokens a byte, 2.7 times under
// (o200k_base: 0.524 tokens a byte, 0.98 against 0.60). Found by a grid
// over dense-word and sparse-word lengths; 16-byte sparse words (n/2) are
// the worst.
func TestProbeCatchesDenseWordsBetweenShortSparseWords(t *testing.T) {
	tau := probeMargin * minRatio[Latin]
	for _, wide := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(32, 15))
		const alpha = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&()*+,-./:;<=>?@[]^_{|}~"
		var b strings.Builder
		for b.Len() < 8000 {
			b.WriteByte(' ')
			for range 31 {
				b.WriteByte(alpha[rng.IntN(len(alpha))])
			}
			b.WriteString(" " + strings.Repeat("=", 15))
		}
		text := b.String()
		density := float64(count(text, wide)) / float64(len(text))
		if density < 2.5*minRatio[Latin] {
			t.Fatalf("o200k %v: the text is only %.3f tokens a byte", wide, density)
		}
		lo, hi := 48*40, 48*80 // 40 whole periods in the middle
		if caught := probeCaught(windowsAt(text, lo, hi, wide), tau); caught < 0.9 {
			t.Errorf("o200k %v: a prompt of %.3f tokens a byte (%.1f times the floor) is caught by the probe with probability %.2f",
				wide, density, density/minRatio[Latin], caught)
		}
	}
}
