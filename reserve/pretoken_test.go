package reserve

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// The encodings' split expressions, as the library compiles them
// (github.com/tiktoken-go/tokenizer/codec, cl100k_base.go and o200k_base.go).
var (
	cl100kSplit = regexp2.MustCompile(`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`, regexp2.None)
	o200kSplit  = regexp2.MustCompile(`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`, regexp2.None)
)

// expressionPieces is text cut by the expression, as the library cuts it.
func expressionPieces(t testing.TB, re *regexp2.Regexp, text string) []string {
	var pieces []string
	m, err := re.FindStringMatch(text)
	for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
		pieces = append(pieces, m.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	return pieces
}

func scannerPieces(piece func(string) int, text string) []string {
	var pieces []string
	for len(text) > 0 {
		if text[0] == del {
			text = text[1:]
			continue
		}
		n := piece(text)
		pieces = append(pieces, text[:n])
		text = text[n:]
	}
	return pieces
}

// alphabet has a character of each class the expressions tell apart, and
// those they treat specially: contractions' letters in both cases and ſ
// (which regexp2 folds to s), line breaks, Unicode spaces, numbers that
// are not digits, title case, modifier and other letters, the three kinds
// of marks, the slash o200k_base keeps after punctuation, emoji.
var alphabet = []rune("aeZLSTsdmlrvREVDMltſ '\x7f\x1c\x00\t\n\r\v\f\u0085\u00a0\u2028\u3000" +
	"0759٣Ⅻ½ǅʰ中あ\u0301ः\u20dd/.(_-😀éÉßΣσΩ\u200b\u00ad")

func randomText(rng *rand.Rand) string {
	var b strings.Builder
	for range 1 + rng.IntN(24) {
		b.WriteRune(alphabet[rng.IntN(len(alphabet))])
	}
	return b.String()
}

// TestPiecesMatchTheExpressions: the scanners cut every text where the
// encodings' expressions do: the test prompts (English, code, CJK) and
// random texts over every class the expressions tell apart. The expressions
// run in the library's generated matcher, as the library runs them.
func TestPiecesMatchTheExpressions(t *testing.T) {
	cases := []struct {
		name  string
		re    *regexp2.Regexp
		piece func(string) int
	}{
		{"cl100k_base", cl100kSplit, cl100kPiece},
		{"o200k_base", o200kSplit, o200kPiece},
	}
	texts := []string{"", "a", "I'm here, they'RE there'S 'll", "HELLOworld helloWorld ABCdefGHI",
		"  \n\n  x\r\n\t1234567 ...///\n\n/", "x  ", "  y", "ǅemo ʰa 中文字 Ab\u0301c"}
	for _, name := range []string{"en", "code", "cjk"} {
		texts = append(texts, readTestdata(t, "prompt_"+name+".txt"))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	random := 20_000
	if testing.Short() {
		random = 2_000
	}
	for range random {
		texts = append(texts, randomText(rng))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, text := range texts {
				want := expressionPieces(t, c.re, text)
				if got := scannerPieces(c.piece, text); !equalPieces(got, want) {
					t.Fatalf("%+q:\n got %+q\nwant %+q", text, got, want)
				}
			}
		})
	}
}

func equalPieces(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzPieces is TestPiecesMatchTheExpressions on any valid text.
func FuzzPieces(f *testing.F) {
	f.Add("I'm here, they'RE there'S 'll 1234 \n\n x")
	f.Add("ǅemo ʰa 中文字 Ab\u0301c ſ 'ſ")
	f.Fuzz(func(t *testing.T, text string) {
		if !utf8.ValidString(text) {
			return
		}
		for _, c := range []struct {
			re    *regexp2.Regexp
			piece func(string) int
		}{{cl100kSplit, cl100kPiece}, {o200kSplit, o200kPiece}} {
			if got, want := scannerPieces(c.piece, text), expressionPieces(t, c.re, text); !equalPieces(got, want) {
				t.Fatalf("%+q:\n got %+q\nwant %+q", text, got, want)
			}
		}
	})
}

// TestCountMatchesTheLibrary: a text's count is the library's count of the
// whole text, random texts with DEL and invalid UTF-8 included. The
// library's generated matcher leaves DEL (0x7f) out of every class, so it
// is in no piece and counts nothing; the pieces leave it out too.
func TestCountMatchesTheLibrary(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	texts := []string{"\x7f", "a\x7fb", " \x7f\x7f 1\x7f", "\xff\xfe abc", "a\xc3", "\n \nx"}
	random := 20_000
	if testing.Short() {
		random = 2_000
	}
	for range random {
		text := randomText(rng)
		if rng.IntN(4) == 0 {
			i := rng.IntN(len(text) + 1)
			text = text[:i] + string([]byte{0x7f, 0xff}[rng.IntN(2)]) + text[i:]
		}
		texts = append(texts, text)
	}
	for _, wide := range []bool{false, true} {
		codec, err := codecFor(wide)
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range texts {
			want, err := codec.Count(text)
			if err != nil {
				t.Fatal(err)
			}
			if got := count(text, wide); got != want {
				t.Fatalf("o200k %v, %+q: %d tokens, the library %d", wide, text, got, want)
			}
		}
	}
}

// FuzzCount is TestCountMatchesTheLibrary on any text.
func FuzzCount(f *testing.F) {
	f.Add("I'm here\x7f, they'RE\xff there'S 'll 1234 \n\n x")
	f.Fuzz(func(t *testing.T, text string) {
		for _, wide := range []bool{false, true} {
			codec, err := codecFor(wide)
			if err != nil {
				t.Fatal(err)
			}
			if want, _ := codec.Count(text); count(text, wide) != want {
				t.Fatalf("o200k %v, %+q: %d tokens, the library %d", wide, text, count(text, wide), want)
			}
		}
	})
}
