package reserve

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer"
)

// Tokenizer counts prompt tokens locally with OpenAI's BPE encodings
// (cl100k_base and o200k_base). The vocabularies are compiled into the
// binary (github.com/tiktoken-go/tokenizer); nothing is downloaded at run
// time. Each encoding is set up lazily, once per process, on first use
// (about 20 ms and a few MiB for o200k_base), and shared by every Tokenizer:
// the codecs are immutable, so nodes and tests in one process need not share
// a Tokenizer value to avoid loading them twice.
//
// Library choice: github.com/tiktoken-go/tokenizer v0.10.0 was measured
// against github.com/pkoukk/tiktoken-go v0.1.8 (+ its offline loader) on a
// 945-token English prompt (testdata/prompt_en.txt, 2 busy shared cores,
// best-to-typical of 7 runs): 0.34-0.56 ms/op vs 0.75-1.02 ms/op for
// cl100k_base and 0.41-0.56 ms/op vs 1.05-1.29 ms/op for o200k_base, i.e.
// about 2x faster; 279 KB vs 440 KB allocated per call (~5.6k allocations
// each, inside the regexp engines); ~20 ms vs ~260 ms and ~6 MiB vs ~22 MiB
// to set up o200k_base. Both gave identical counts on both encodings for
// every test string, and those counts match the reference tiktoken (Rust
// core) on the same strings. It also merges long pieces in O(n log n) and
// needs no process-global loader (pkoukk's SetBpeLoader is an unguarded
// global). Its cost: the vocabularies are Go source, so a cold build takes
// ~19 s instead of ~11 s (both counting the standard library).
//
// The library's own pre-tokenizer (a backtracking regexp engine that
// allocates for every piece) cost 0.3 ms per 945 tokens; the tokenizer cuts
// the pieces itself (pretoken.go) and remembers each piece's count, so a
// prompt made of words counted before costs about 50 µs per 1 000 tokens,
// and only new pieces go through the library. The counts are the
// library's, DEL and its line-break quirk included
// (TestCountMatchesTheLibrary, FuzzCount).
//
// A Tokenizer also remembers the counts of the texts it counted last
// (counts): a chat sends its system prompt and its history again with
// every turn, and a text's count never changes.
//
// A Tokenizer is safe for concurrent use. The zero Tokenizer remembers no
// texts (the pieces' counts are the process's).
type Tokenizer struct {
	counts  *countCache  // nil: nothing remembered
	counted atomic.Int64 // bytes the tokenizer ran over (CountedBytes)
}

// CountedBytes is how many bytes of text the tokenizer has run over, the
// counts remembered not included: the CPU it spent, for tests to see
// where it is not spent.
func (t *Tokenizer) CountedBytes() int64 { return t.counted.Load() }

var (
	cl100k = sync.OnceValues(func() (tokenizer.Codec, error) { return tokenizer.Get(tokenizer.Cl100kBase) })
	o200k  = sync.OnceValues(func() (tokenizer.Codec, error) { return tokenizer.Get(tokenizer.O200kBase) })
)

// NewTokenizer returns a Tokenizer. Encodings are loaded lazily; the error
// is reserved for set-up failures and is currently always nil.
func NewTokenizer() (*Tokenizer, error) {
	return &Tokenizer{counts: newCountCache(countSlots)}, nil
}

// Count returns the number of tokens text encodes to for model, as plain
// text: special-token markers such as "<|endoftext|>" in text are counted as
// the ordinary text they are, which is how providers bill user content.
//
// o200k_base is used for gpt-4o*, gpt-4.1*, gpt-4.5*, gpt-5*, o1*, o3*, o4*,
// chatgpt-4o* and gpt-oss*; cl100k_base for everything else, including
// claude-* and unknown or self-hosted models, where it is an approximation
// (the router settles against the provider's reported usage anyway). A
// routing prefix ("openai/gpt-4o") and a fine-tune prefix ("ft:gpt-4o-mini:org::id")
// are ignored, and the match is case-insensitive.
//
// Count is CPU-bound: about 50 µs per 1 000 tokens of words counted before,
// up to 0.2 ms per 1 000 tokens of text whose pieces are new (random
// base64), or a hash of the text (about 0.1 ns a byte) when the same text
// was counted recently.
func (t *Tokenizer) Count(model, text string) int {
	if text == "" {
		return 0
	}
	wide := usesO200k(model)
	h, cached := t.counts.lookup(text, wide)
	if cached >= 0 {
		return cached
	}
	t.counted.Add(int64(len(text)))
	n := count(text, wide)
	t.counts.store(h, len(text), n)
	return n
}

// countUncached is Count without the cache of recent counts, for a text
// that will not come again (a probe's random window): it would only evict
// one that may.
func (t *Tokenizer) countUncached(model, text string) int {
	if text == "" {
		return 0
	}
	t.counted.Add(int64(len(text)))
	return count(text, usesO200k(model))
}

// count is the tokens text encodes to: the sum of its pieces' counts
// (pretoken.go), each remembered in pieceCounts; or, for text that is not
// valid UTF-8 (the library reads each invalid byte as U+FFFD, which the
// pieces would have to copy), the library's count of the whole.
func count(text string, wide bool) int {
	codec, err := codecFor(wide)
	if err != nil {
		return (len(text) + 3) / 4
	}
	if !utf8.ValidString(text) {
		return codecCount(codec, text)
	}
	piece, seed := cl100kPiece, uint64(0)
	if wide {
		piece, seed = o200kPiece, o200kSeed
	}
	n := 0
	for len(text) > 0 {
		if text[0] == del {
			text = text[1:]
			continue
		}
		size := piece(text)
		n += pieceCounts.count(codec, text[:size], seed)
		text = text[size:]
	}
	return n
}

func codecFor(wide bool) (tokenizer.Codec, error) {
	if wide {
		return o200k()
	}
	return cl100k()
}

func codecCount(codec tokenizer.Codec, text string) int {
	if n, err := codec.Count(text); err == nil {
		return n
	}
	// Defensive only: neither encoding can fail with the default
	// (non-strict) error mode and no match timeout. Fall back to the usual
	// ~4 bytes per token.
	return (len(text) + 3) / 4
}

// pieceCounts remembers the counts of pieces, for every Tokenizer in the
// process: a piece's count is a fact of its encoding, like the codec.
// Prose's pieces are words, and a few thousand of them make most of any
// text, so nearly every piece is found here (about 20 ns) and only new ones
// go through the library (0.3 to 1 µs each).
var pieceCounts = newCountCache(pieceSlots)

const pieceSlots = 1 << 16 // 512 KiB

// count is piece's count, remembered or from codec.
func (c *countCache) count(codec tokenizer.Codec, piece string, seed uint64) int {
	h := maphash.String(hashSeed, piece) ^ seed
	if n := c.load(h); n >= 0 {
		return n
	}
	n := codecCount(codec, piece)
	c.store(h, len(piece), n)
	return n
}

// countCache is a direct-mapped table of recent counts, without locks: each
// slot is one word holding the high bits of the text's hash (its tag) and
// its count. A slot is overwritten by the next text that maps to it; a tag
// that does not match is a miss, so a count comes back only for the text it
// was stored for (unless two texts' hashes agree in all 44 tag bits and the
// slot bits below bit 20, by chance: the hash is keyed, hashSeed).
type countCache struct {
	slots []atomic.Uint64 // a power of two of them
}

func newCountCache(slots int) *countCache {
	return &countCache{slots: make([]atomic.Uint64, slots)}
}

const (
	countSlots = 1 << 13 // 64 KiB
	countBits  = 20      // a stored count is below 1<<countBits
	countMask  = 1<<countBits - 1
	// o200kSeed makes the same text's hash differ between encodings.
	o200kSeed = 0x9e3779b97f4a7c15
)

// hashSeed keys the tables' hashes, a random one per process: with a hash
// anyone can compute (xxhash, unkeyed), a tenant can forge a piece of
// 1 040 letters that takes the count of " the" (1 token for 566) in 16
// million tries, and with one more, sharing only its slot, put 566 in the
// table for " the", for every tenant's prompts.
var hashSeed = maphash.MakeSeed()

// lookup returns text's hash for the encoding and its remembered count, or
// -1 when there is none.
func (c *countCache) lookup(text string, o200k bool) (uint64, int) {
	if c == nil {
		return 0, -1
	}
	h := maphash.String(hashSeed, text)
	if o200k {
		h ^= o200kSeed
	}
	return h, c.load(h)
}

// load is the count remembered for hash h, or -1.
func (c *countCache) load(h uint64) int {
	v := c.slots[h&uint64(len(c.slots)-1)].Load()
	if v != 0 && v>>countBits == h>>countBits {
		return int(v & countMask)
	}
	return -1
}

// store remembers n as the count of the text of size bytes hashed to h. A
// count is never above the text's bytes, so texts under a MiB always fit.
func (c *countCache) store(h uint64, size, n int) {
	if c == nil || size > countMask || n > countMask || n <= 0 {
		return
	}
	c.slots[h&uint64(len(c.slots)-1)].Store(h>>countBits<<countBits | uint64(n))
}

// CountBytes is Count for a byte slice (e.g. a request body field). Invalid
// UTF-8 is tokenized as is; its count is an approximation.
func (t *Tokenizer) CountBytes(model string, text []byte) int {
	if len(text) == 0 {
		return 0
	}
	return t.Count(model, string(text))
}

// o200kPrefixes are the model-name prefixes tokenized with o200k_base.
var o200kPrefixes = [...]string{
	"gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss",
}

// usesO200k reports whether model is tokenized with o200k_base. It does not
// allocate.
func usesO200k(model string) bool {
	if i := strings.LastIndexByte(model, '/'); i >= 0 {
		model = model[i+1:]
	}
	if len(model) > 3 && strings.EqualFold(model[:3], "ft:") {
		model = model[3:]
	}
	for _, p := range o200kPrefixes {
		if len(model) >= len(p) && strings.EqualFold(model[:len(p)], p) {
			return true
		}
	}
	return false
}
