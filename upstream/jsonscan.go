package upstream

import (
	"bytes"
	"strconv"
	"unicode/utf8"
)

// A tiny, non-recursive JSON walker for the hot path (the stream filter,
// response usage, and a client's body once checkJSON passed it). It trusts
// nothing: on malformed input it stops early and reports what it found so
// far, never panics, never reads out of bounds. It does not validate, and
// allocates only to decode a key written with escapes.

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipWS(s []byte, i int) int {
	for i < len(s) {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// stringEnd returns the index just past the string whose opening quote is at
// s[i], or -1 if it is not terminated.
func stringEnd(s []byte, i int) int {
	// Most strings in a chunk are short keys and ids: a plain loop beats
	// IndexByte's call overhead for them.
	j := i + 1
	for short := min(len(s), j+24); j < short; j++ {
		switch s[j] {
		case '"':
			return j + 1
		case '\\':
			j++
		}
	}
	for j < len(s) {
		k := bytes.IndexByte(s[j:], '"')
		if k < 0 {
			return -1
		}
		q := j + k
		bs := 0 // backslashes right before the quote
		for b := q - 1; b > i && s[b] == '\\'; b-- {
			bs++
		}
		if bs%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
	return -1
}

// structural marks the bytes valueEnd must look at inside a container.
var structural = [256]bool{'"': true, '{': true, '[': true, '}': true, ']': true}

// valueEnd returns the index just past the value starting at s[i] (which is
// not whitespace), or -1 if it runs off the end.
func valueEnd(s []byte, i int) int {
	if i >= len(s) {
		return -1
	}
	switch s[i] {
	case '"':
		return stringEnd(s, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(s); j++ {
			if !structural[s[j]] {
				continue
			}
			switch s[j] {
			case '"':
				e := stringEnd(s, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	case '}', ']', ',', ':':
		return -1
	}
	j := i
	for j < len(s) {
		switch s[j] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return j
		}
		j++
	}
	return j // a bare scalar at the end of the input
}

// iter walks the members of one object or the elements of one array.
type iter struct {
	s        []byte
	i        int
	obj      bool
	n        int // members returned so far
	keyStart int // index in s of the current member's key quote (objects)
	valStart int // index in s of the current value
	valEnd   int // index in s just past the current value
	prevEnd  int // valEnd of the previous member, -1 for the first
}

// newIter starts walking the object or array at s[i:]; ok is false when s[i]
// is neither.
func newIter(s []byte, i int) (it iter, ok bool) {
	i = skipWS(s, i)
	if i >= len(s) || (s[i] != '{' && s[i] != '[') {
		return iter{}, false
	}
	return iter{s: s, i: i + 1, obj: s[i] == '{', prevEnd: -1, valEnd: -1}, true
}

// iterValue walks the object or array v (a whole value).
func iterValue(v []byte) (iter, bool) { return newIter(v, 0) }

// next advances to the next member. key is the member's name, decoded
// (a copy) where it has an escape, else as it lies between its quotes; nil
// in arrays.
func (it *iter) next() (key, val []byte, ok bool) {
	s := it.s
	i := skipWS(s, it.i)
	if i >= len(s) {
		return nil, nil, false
	}
	if it.n > 0 {
		if s[i] != ',' {
			return nil, nil, false
		}
		i = skipWS(s, i+1)
		if i >= len(s) {
			return nil, nil, false
		}
	}
	if it.obj {
		if s[i] != '"' {
			return nil, nil, false
		}
		ke, escaped := keyEnd(s, i)
		if ke < 0 {
			return nil, nil, false
		}
		it.keyStart = i
		key = s[i+1 : ke-1]
		if escaped {
			key = decodeKey(key) // "us\u0061ge" is usage to any decoder
		}
		i = skipWS(s, ke)
		if i >= len(s) || s[i] != ':' {
			return nil, nil, false
		}
		i = skipWS(s, i+1)
	}
	ve := valueEnd(s, i)
	if ve < 0 {
		return nil, nil, false
	}
	it.prevEnd = it.valEnd
	it.valStart, it.valEnd = i, ve
	it.i = ve
	it.n++
	return key, s[i:ve], true
}

// keyEnd is stringEnd for a key, short as keys are: it also reports
// whether the key has an escape.
func keyEnd(s []byte, i int) (end int, escaped bool) {
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '"':
			return j + 1, escaped
		case '\\':
			escaped = true
			j++
		}
	}
	return -1, false
}

// decodeKey decodes a key k written with escapes (without its quotes).
func decodeKey(k []byte) []byte {
	q := make([]byte, 0, len(k)+2)
	q = append(append(append(q, '"'), k...), '"')
	out, _ := appendString(nil, q, len(q))
	return out
}

func isNull(v []byte) bool { return len(v) == 4 && string(v) == "null" }

func isString(v []byte) bool { return len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' }

const maxTokenCount = 1 << 40 // clamp for numbers reported by a provider

// tokenCount reads a non-negative token count reported by a provider.
// ok is false for anything but a number (null included); negative numbers
// read as 0, fractions are truncated, huge numbers are clamped.
func tokenCount(v []byte) (n int, ok bool) {
	if len(v) == 0 {
		return 0, false
	}
	if v[0] == '-' {
		if len(v) > 1 && v[1] >= '0' && v[1] <= '9' {
			return 0, true
		}
		return 0, false
	}
	i := 0
	for ; i < len(v) && v[i] >= '0' && v[i] <= '9'; i++ {
		if n < maxTokenCount {
			n = n*10 + int(v[i]-'0')
		}
	}
	if i == 0 {
		return 0, false
	}
	if i < len(v) { // fraction or exponent: rare, take the slow path
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return 0, false
		}
		switch {
		case f <= 0:
			return 0, true
		case f >= maxTokenCount:
			return maxTokenCount, true
		}
		return int(f), true
	}
	return min(n, maxTokenCount), true
}

// appendString appends the decoded content of the JSON string v (with its
// quotes) to dst, but never grows dst past limit bytes. n is the full decoded
// length, whether or not it all fit. A value that is not a string appends
// nothing.
func appendString(dst, v []byte, limit int) (_ []byte, n int) {
	if !isString(v) {
		return dst, 0
	}
	v = v[1 : len(v)-1]
	if bytes.IndexByte(v, '\\') < 0 {
		return appendLimited(dst, v, limit), len(v)
	}
	var rb [utf8.UTFMax]byte
	for len(v) > 0 {
		j := bytes.IndexByte(v, '\\')
		if j < 0 {
			dst = appendLimited(dst, v, limit)
			n += len(v)
			break
		}
		dst = appendLimited(dst, v[:j], limit)
		n += j
		v = v[j:]
		if len(v) < 2 { // a lone trailing backslash: keep it
			dst = appendLimited(dst, v, limit)
			n += len(v)
			break
		}
		var c byte
		switch v[1] {
		case '"', '\\', '/':
			c = v[1]
		case 'n':
			c = '\n'
		case 't':
			c = '\t'
		case 'r':
			c = '\r'
		case 'b':
			c = '\b'
		case 'f':
			c = '\f'
		case 'u':
			r, used := decodeU(v)
			w := utf8.EncodeRune(rb[:], r)
			dst = appendLimited(dst, rb[:w], limit)
			n += w
			v = v[used:]
			continue
		default: // invalid escape: keep it as written
			dst = appendLimited(dst, v[:2], limit)
			n += 2
			v = v[2:]
			continue
		}
		if len(dst) < limit {
			dst = append(dst, c)
		}
		n++
		v = v[2:]
	}
	return dst, n
}

// decodeU decodes a \uXXXX escape (and the low half of a surrogate pair
// after it) at the start of v; used is how many bytes it took.
func decodeU(v []byte) (r rune, used int) {
	r1, ok := hex4(v, 2)
	if !ok {
		return utf8.RuneError, 2
	}
	if r1 >= 0xD800 && r1 < 0xDC00 && len(v) >= 12 && v[6] == '\\' && v[7] == 'u' {
		if r2, ok := hex4(v, 8); ok && r2 >= 0xDC00 && r2 < 0xE000 {
			return (r1-0xD800)<<10 | (r2 - 0xDC00) + 0x10000, 12
		}
	}
	if r1 >= 0xD800 && r1 < 0xE000 {
		return utf8.RuneError, 6
	}
	return r1, 6
}

func hex4(v []byte, i int) (rune, bool) {
	if len(v) < i+4 {
		return 0, false
	}
	var r rune
	for _, c := range v[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

func appendLimited(dst, p []byte, limit int) []byte {
	if room := limit - len(dst); room < len(p) {
		if room <= 0 {
			return dst
		}
		p = p[:room]
	}
	return append(dst, p...)
}
