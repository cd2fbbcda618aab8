package reserve

import (
	"unicode"
	"unicode/utf8"
)

// Pre-tokenization: BPE encodings first cut a text into pieces with a
// regular expression, then merge each piece's bytes into tokens; a piece's
// tokens never depend on its neighbours. The library runs that expression
// with a backtracking engine that allocates for every piece (about 40 ns a
// byte), so the tokenizer cuts the pieces itself, with the two scanners
// below, and counts each piece once: a text's count is the sum of its
// pieces' counts, and prose repeats its pieces (words) all the time.
//
// Each scanner returns the byte length of the first piece of a non-empty,
// valid UTF-8 text that does not start with del, exactly as the encoding's expression (in the library's
// regexp2 dialect: \s is unicode.IsSpace, \p{..} Go's unicode tables, the
// alternation atomic and tried in order) would match at its start.
// TestPiecesMatchTheExpressions holds them to it.

// cl100kPiece is cl100k_base's
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func cl100kPiece(s string) int {
	c0, n0 := decode(s)
	if n := contraction(s); n > 0 {
		return n
	}
	switch {
	case isLetter(c0):
		return n0 + runOf(s[n0:], isLetter)
	case isPrefix(c0):
		if c1, n1 := decode(s[n0:]); n1 > 0 && isLetter(c1) {
			return n0 + n1 + runOf(s[n0+n1:], isLetter)
		}
	case isNumber(c0):
		return numbers(s)
	}
	return punctuationOrSpace(s, false)
}

// o200kPiece is o200k_base's
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//	\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
func o200kPiece(s string) int {
	c0, n0 := decode(s)
	prefix := isPrefix(c0)
	// First alternative: upper-ish letters then lower-ish ones; the
	// optional prefix is tried with its character, then without.
	if prefix {
		if n := upperLower(s[n0:]); n > 0 {
			return n0 + n + contraction(s[n0+n:])
		}
	}
	if n := upperLower(s); n > 0 {
		return n + contraction(s[n:])
	}
	// Second: at least one upper-ish letter, then lower-ish ones.
	if prefix {
		if u := runOf(s[n0:], isUpperish); u > 0 {
			n := n0 + u + runOf(s[n0+u:], isLowerish)
			return n + contraction(s[n:])
		}
	}
	if u := runOf(s, isUpperish); u > 0 {
		n := u + runOf(s[u:], isLowerish)
		return n + contraction(s[n:])
	}
	if isNumber(c0) {
		return numbers(s)
	}
	return punctuationOrSpace(s, true)
}

// upperLower is the length of [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+
// at the start of s, or 0. The first loop is greedy and backtracks: the
// lower-ish run starts at the last position of the upper-ish run (or just
// after it) that holds a lower-ish letter.
func upperLower(s string) int {
	u := runOf(s, isUpperish)
	if l := runOf(s[u:], isLowerish); l > 0 {
		return u + l
	}
	// Back off the upper-ish run one character at a time: the last
	// character of it in both classes (Lm, Lo, M) is the lower-ish run,
	// one character long (the next is not lower-ish).
	for i := u; i > 0; {
		r, n := utf8.DecodeLastRuneInString(s[:i])
		if isLowerish(r) {
			return i
		}
		i -= n
	}
	return 0
}

// contraction is the length of (?i:'s|'t|'re|'ve|'m|'ll|'d) at the start
// of s, or 0. regexp2 folds s to ſ (U+017F) too.
func contraction(s string) int {
	if len(s) < 2 || s[0] != '\'' {
		return 0
	}
	switch s[1] | 0x20 {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if len(s) > 2 && s[2]|0x20 == 'e' {
			return 3
		}
	case 'l':
		if len(s) > 2 && s[2]|0x20 == 'l' {
			return 3
		}
	}
	if len(s) >= 3 && s[1:3] == "ſ" {
		return 3
	}
	return 0
}

// numbers is \p{N}{1,3}.
func numbers(s string) int {
	n := 0
	for range 3 {
		r, size := decode(s[n:])
		if size == 0 || !isNumber(r) {
			break
		}
		n += size
	}
	return n
}

// punctuationOrSpace is the shared tail of both expressions:
//
//	?[^\s\p{L}\p{N}]+[<trail>]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// with trail \r\n (cl100k_base), or \r\n/ when slash (o200k_base).
func punctuationOrSpace(s string, slash bool) int {
	i := 0
	if s[0] == ' ' {
		i = 1
	}
	if p := runOf(s[i:], isPunctuation); p > 0 {
		i += p
		for i < len(s) && (s[i] == '\r' || s[i] == '\n' || s[i] == '/' && slash) {
			i++
		}
		return i
	}
	// \s*[\r\n]+: the library's generated matcher backs the \s* off to
	// the run's first line break, not its last as a backtracking engine
	// would (and tiktoken does): "\n \nx" is "\n", " \n", "x" to it, and
	// so here, so that counts stay the library's. The run is read only up
	// to that line break: reading all of it for each piece would make a
	// run of " \n" quadratic (32 KiB of it would take a second).
	w := 0
	for w < len(s) {
		if s[w] == '\r' || s[w] == '\n' {
			for w < len(s) && (s[w] == '\r' || s[w] == '\n') {
				w++
			}
			return w
		}
		r, n := decode(s[w:])
		if !unicode.IsSpace(r) {
			break
		}
		w += n
	}
	if w == len(s) {
		return w // \s+(?!\S) at the end
	}
	// \s+(?!\S) short of the last space, which stays with what follows;
	// \s+ when the run is that one space.
	_, last := utf8.DecodeLastRuneInString(s[:w])
	if w > last {
		return w - last
	}
	if w == 0 {
		// Unreachable for valid text: every character is a letter, a
		// number, a space or in [^\s\p{L}\p{N}]. Move on by one.
		_, n := decode(s)
		return n
	}
	return w
}

// runOf is the byte length of the run of characters in class at the start
// of s.
func runOf(s string, class func(rune) bool) int {
	i := 0
	for i < len(s) {
		r, n := decode(s[i:])
		if !class(r) {
			break
		}
		i += n
	}
	return i
}

// decode is utf8.DecodeRuneInString with the ASCII case first.
func decode(s string) (rune, int) {
	if len(s) > 0 && s[0] < utf8.RuneSelf {
		return rune(s[0]), 1
	}
	return utf8.DecodeRuneInString(s)
}

// The classes, with ASCII answered from a table.
const (
	classLetter = 1 << iota
	classLower
	classUpper
	classNumber
	classSpace
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for r := range rune(utf8.RuneSelf) {
		switch {
		case unicode.IsLower(r):
			t[r] = classLetter | classLower
		case unicode.IsUpper(r):
			t[r] = classLetter | classUpper
		case unicode.IsDigit(r):
			t[r] = classNumber
		case unicode.IsSpace(r):
			t[r] = classSpace
		}
	}
	return t
}()

func isLetter(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiClass[r]&classLetter != 0
	}
	return unicode.IsLetter(r)
}

func isNumber(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiClass[r]&classNumber != 0
	}
	return unicode.IsNumber(r)
}

func isSpace(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiClass[r]&classSpace != 0
	}
	return unicode.IsSpace(r)
}

// isPunctuation is [^\s\p{L}\p{N}].
func isPunctuation(r rune) bool { return !isSpace(r) && !isLetter(r) && !isNumber(r) && r != del }

// isPrefix is [^\r\n\p{L}\p{N}].
func isPrefix(r rune) bool { return r != '\r' && r != '\n' && !isLetter(r) && !isNumber(r) && r != del }

// del is in no class of the library's generated matcher (its ASCII bitmaps
// leave out 0x7f), so it matches nothing there and the matcher steps over
// it: it is in no piece and counts no token. The pieces leave it out too.
const del = 0x7f

// isUpperish is [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}].
func isUpperish(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiClass[r]&classUpper != 0
	}
	return unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M)
}

// isLowerish is [\p{Ll}\p{Lm}\p{Lo}\p{M}].
func isLowerish(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiClass[r]&classLower != 0
	}
	return unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M)
}
