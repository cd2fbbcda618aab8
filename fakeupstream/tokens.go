package fakeupstream

import (
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// words are the pieces of generated text. Each is 4 bytes (one token for the
// default counter) and a single token for cl100k_base and o200k_base (a
// space followed by a common three-letter word), so N pieces count as N
// tokens whether counted one by one or concatenated.
var words = [...]string{
	" the", " and", " for", " you", " are", " not", " but", " can",
	" was", " all", " one", " has", " new", " now", " any", " out",
	" get", " use", " day", " way", " see", " how", " our", " who",
}

// quotedWords are words as JSON strings.
var quotedWords = func() (q [len(words)][]byte) {
	for i, w := range words {
		q[i] = appendJSONString(nil, w)
	}
	return q
}()

// GeneratedText returns the text of a completion of n tokens, as the server
// generates it (the concatenation of the streamed pieces).
func GeneratedText(n int) string { return string(appendText(nil, n)) }

// appendText appends the text of a completion of n tokens (needs no JSON
// escaping).
func appendText(b []byte, n int) []byte {
	for i := range n {
		b = append(b, words[i%len(words)]...)
	}
	return b
}

// promptTokens sums count over the text pieces of the prompt: message
// contents (string or array of parts), system, prompt and input.
func promptTokens(root gjson.Result, model string, count func(model, text string) int) int {
	total := 0
	root.Get("messages").ForEach(func(_, m gjson.Result) bool {
		total += countPieces(m.Get("content"), model, count)
		return true
	})
	for _, f := range [...]string{"system", "prompt", "input", "instructions"} {
		total += countPieces(root.Get(f), model, count)
	}
	return total
}

// countPieces counts a string, an array of strings / text parts / token
// ids / token arrays, or a text part.
func countPieces(v gjson.Result, model string, count func(model, text string) int) int {
	switch {
	case v.Type == gjson.String:
		return count(model, v.Str)
	case v.IsObject():
		if t := v.Get("text"); t.Type == gjson.String {
			return count(model, t.Str)
		}
		if c := v.Get("content"); c.Exists() { // a Responses input item
			return countPieces(c, model, count)
		}
	case v.IsArray():
		total := 0
		v.ForEach(func(_, e gjson.Result) bool {
			if e.Type == gjson.Number {
				total++ // a token id
			} else {
				total += countPieces(e, model, count)
			}
			return true
		})
		return total
	}
	return 0
}

// countInputs returns the number of embedding inputs: a string or an array
// of token ids is one input; any other array has one input per element.
func countInputs(v gjson.Result) int {
	switch {
	case v.Type == gjson.String:
		return 1
	case v.IsArray():
		n, ids := 0, false
		v.ForEach(func(_, e gjson.Result) bool {
			n++
			ids = ids || e.Type == gjson.Number
			return true
		})
		if ids {
			return 1
		}
		return n
	}
	return 0
}

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
