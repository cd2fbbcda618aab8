package reserve

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
)

func loadPrompt(tb testing.TB) string {
	tb.Helper()
	return readTestdata(tb, "prompt_en.txt")
}

func readTestdata(tb testing.TB, name string) string {
	tb.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

func newTokenizer(tb testing.TB) *Tokenizer {
	tb.Helper()
	tok, err := NewTokenizer()
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// Expected counts were checked against the reference tiktoken (the Rust core,
// via the npm "tiktoken" 1.0.22 WASM build, encode_ordinary); the first six
// are also the values published in tiktoken's README and OpenAI's cookbook.
var knownCounts = []struct {
	text          string
	cl100k, o200k int
}{
	{"", 0, 0},
	{"hello world", 2, 2},
	{"Hello, world!", 4, 4},
	{"tiktoken is great!", 6, 6},
	{"antidisestablishmentarianism", 6, 6},
	{"2 + 2 = 4", 7, 7},
	{"お誕生日おめでとう", 9, 8},
	{"The quick brown fox jumps over the lazy dog.", 10, 10},
	{"I'm you're we've they'll she'd IT'S", 12, 7},
	{"func main() {\n\tfmt.Println(\"hi\")\n}\n", 10, 10},
	{"1234567890 3.14159 -42 1e10", 15, 15},
	{"emoji 🎉🚀👍🏽 mixed 中文 العربية русский", 25, 12},
	{"<|endoftext|> special", 8, 8},
	{"HTTPServerError camelCaseWord snake_case_word ALLCAPS Ünïcödé", 18, 16},
	{"   \n\n   \n", 2, 2},
}

func TestCountKnown(t *testing.T) {
	tok := newTokenizer(t)
	for _, tc := range knownCounts {
		if got := tok.Count("gpt-4", tc.text); got != tc.cl100k {
			t.Errorf("cl100k %q: got %d, want %d", tc.text, got, tc.cl100k)
		}
		if got := tok.Count("gpt-4o", tc.text); got != tc.o200k {
			t.Errorf("o200k %q: got %d, want %d", tc.text, got, tc.o200k)
		}
		if got := tok.CountBytes("gpt-4o", []byte(tc.text)); got != tc.o200k {
			t.Errorf("CountBytes o200k %q: got %d, want %d", tc.text, got, tc.o200k)
		}
	}
	// The ~1k-token benchmark prompt (reference: 945 cl100k, 942 o200k).
	p := loadPrompt(t)
	if got := tok.Count("claude-3-5-sonnet", p); got != 945 {
		t.Errorf("prompt cl100k: got %d, want 945", got)
	}
	if got := tok.Count("gpt-5-mini", p); got != 942 {
		t.Errorf("prompt o200k: got %d, want 942", got)
	}
}

func TestEncodingForModel(t *testing.T) {
	o200k := []string{
		"gpt-4o", "gpt-4o-mini", "gpt-4o-2024-08-06", "gpt-4.1", "gpt-4.1-nano", "gpt-5", "gpt-5-mini",
		"o1", "o1-preview", "o3-mini", "o4-mini", "chatgpt-4o-latest", "GPT-4o", "openai/gpt-4o",
		"ft:gpt-4o-mini:acme::abc123", "gpt-4.5-preview", "gpt-oss-120b",
	}
	cl100k := []string{
		"gpt-4", "gpt-4-turbo", "gpt-3.5-turbo", "text-embedding-3-small", "claude-3-5-sonnet-20241022",
		"claude-opus-4", "llama-3.1-70b", "mistral-large", "", "my-selfhosted-model", "ft:gpt-3.5-turbo:acme::x",
		"anthropic/claude-3-haiku",
	}
	for _, m := range o200k {
		if !usesO200k(m) {
			t.Errorf("%q: want o200k_base", m)
		}
	}
	for _, m := range cl100k {
		if usesO200k(m) {
			t.Errorf("%q: want cl100k_base", m)
		}
	}
	// The mapping is visible in counts: this string differs between the two.
	tok := newTokenizer(t)
	s := "お誕生日おめでとう"
	if a, b := tok.Count("claude-3-haiku", s), tok.Count("o3", s); a != 9 || b != 8 {
		t.Errorf("claude=%d (want 9) o3=%d (want 8)", a, b)
	}
	if n := testing.AllocsPerRun(100, func() { usesO200k("openai/ft:gpt-4o-mini:x") }); n != 0 {
		t.Errorf("usesO200k allocates %v", n)
	}
}

func TestCountOddInput(t *testing.T) {
	tok := newTokenizer(t)
	// Invalid UTF-8 must not panic and must count something.
	if n := tok.CountBytes("gpt-4o", []byte{0xff, 0xfe, 'a', 0xc3}); n <= 0 {
		t.Errorf("invalid UTF-8: %d tokens", n)
	}
	if n := tok.CountBytes("gpt-4", nil); n != 0 {
		t.Errorf("nil: %d", n)
	}
	// Long single pieces and whitespace runs stay linear-ish (no blow-up).
	for _, s := range []string{strings.Repeat("a", 200_000), strings.Repeat(" ", 200_000), strings.Repeat("\n", 50_000)} {
		if n := tok.Count("gpt-4o", s); n <= 0 || n > len(s) {
			t.Errorf("len %d: %d tokens", len(s), n)
		}
	}
}

func TestTokenizerConcurrent(t *testing.T) {
	tok := newTokenizer(t) // fresh: exercises the lazy once under contention
	p := loadPrompt(t)
	want := map[string]int{"gpt-4": 945, "gpt-4o": 942}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 5 {
				m := "gpt-4"
				if (g+i)%2 == 0 {
					m = "gpt-4o"
				}
				if got := tok.Count(m, p); got != want[m] {
					t.Errorf("%s: got %d, want %d", m, got, want[m])
				}
			}
		})
	}
	wg.Wait()
}

// TestCountRemembered: a Tokenizer that remembers counts gives the count a
// fresh one computes, for each encoding, for texts that share a slot, and
// after slots were overwritten many times over.
func TestCountRemembered(t *testing.T) {
	tok, fresh := newTokenizer(t), &Tokenizer{}
	p := loadPrompt(t)
	models := []string{"gpt-4", "gpt-4o"}
	texts := []string{"hello there", p, strings.Repeat("ab ", 1000), "こんにちは世界"}
	for i := range 3 * countSlots {
		texts = append(texts, fmt.Sprintf("message %d of a long chat", i))
	}
	for round := range 2 {
		for i, text := range texts {
			m := models[i%2]
			if round == 1 {
				m = models[(i+1)%2] // the same text, now in the other encoding
			}
			if got, want := tok.Count(m, text), fresh.Count(m, text); got != want {
				t.Fatalf("round %d, %s %.30q: %d, fresh %d", round, m, text, got, want)
			}
		}
	}
	// Found again: the same count, no tokenizer allocation.
	const text = "You are a helpful assistant."
	want := tok.Count("gpt-4o", text)
	if allocs := testing.AllocsPerRun(100, func() {
		if tok.Count("gpt-4o", text) != want {
			t.Fatal("remembered count differs")
		}
	}); allocs != 0 {
		t.Errorf("a remembered count allocates %v times", allocs)
	}
	// Texts with the same slot and different tags never take each other's count.
	c := newCountCache(countSlots)
	h1, _ := c.lookup("a", false)
	c.store(h1, 1, 7)
	if _, n := c.lookup("a", true); n == 7 {
		t.Error("o200k found cl100k's count")
	}
	if _, n := c.lookup("a", false); n != 7 {
		t.Errorf("stored count not found: %d", n)
	}
	c.slots[h1&(countSlots-1)].Store((h1>>countBits+1)<<countBits | 7) // another tag in a's slot
	if _, n := c.lookup("a", false); n != -1 {
		t.Errorf("another text's count taken: %d", n)
	}
}
