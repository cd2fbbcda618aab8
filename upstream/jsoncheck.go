package upstream

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// jsonProblem is what checkJSON found wrong with a client's body.
type jsonProblem uint8

const (
	jsonOK jsonProblem = iota
	jsonMalformed
	jsonTooDeep // arrays and objects nested deeper than maxJSONDepth
)

// checkJSON checks that b is one JSON value (RFC 8259: strings without
// control characters, valid escapes, numbers in JSON's grammar) nesting
// arrays and objects at most maxJSONDepth deep, in one pass and without
// recursion, before ParseRequest walks it. Strings, most of a prompt, are
// crossed eight bytes at a time; whitespace is skipped in place (the same
// code through skipWS measured 10 % slower in the stream filter, by code
// layout alone). It does not check
// UTF-8 (utf8.Valid does, faster). The first problem met is the one
// reported.
func checkJSON(b []byte) jsonProblem {
	// Which open containers are objects (a bit set per depth), innermost
	// last.
	var objects [maxJSONDepth / 64]uint64
	depth := 0
	i := skipWS(b, 0)
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return jsonMalformed
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if depth == maxJSONDepth {
				return jsonTooDeep
			}
			closer := byte(']')
			if c == '{' {
				closer = '}'
				objects[depth/64] |= 1 << (depth % 64)
			} else {
				objects[depth/64] &^= 1 << (depth % 64)
			}
			depth++
			for i++; i < len(b) && isSpace(b[i]); i++ {
			}
			if i < len(b) && b[i] == closer {
				depth--
				i++
				break // an empty one: a value ends
			}
			if closer == '}' {
				if i = memberValue(b, i); i < 0 {
					return jsonMalformed
				}
			}
			continue // its first value
		case c == '"':
			if i = strictStringEnd(b, i); i < 0 {
				return jsonMalformed
			}
		case c == '-' || c >= '0' && c <= '9':
			if i = numberEnd(b, i); i < 0 {
				return jsonMalformed
			}
		case c == 't' && bytes.HasPrefix(b[i:], litTrue):
			i += len(litTrue)
		case c == 'f' && bytes.HasPrefix(b[i:], litFalse):
			i += len(litFalse)
		case c == 'n' && bytes.HasPrefix(b[i:], litNull):
			i += len(litNull)
		default:
			return jsonMalformed
		}
		// A value ended: what follows closes its container, or separates
		// it from the next value.
		for {
			for i < len(b) && isSpace(b[i]) {
				i++
			}
			if depth == 0 {
				if i == len(b) {
					return jsonOK
				}
				return jsonMalformed
			}
			if i >= len(b) {
				return jsonMalformed
			}
			object := objects[(depth-1)/64]&(1<<((depth-1)%64)) != 0
			if b[i] == '}' && object || b[i] == ']' && !object {
				depth--
				i++
				continue
			}
			if b[i] != ',' {
				return jsonMalformed
			}
			for i++; i < len(b) && isSpace(b[i]); i++ {
			}
			if object {
				if i = memberValue(b, i); i < 0 {
					return jsonMalformed
				}
			}
			break
		}
	}
}

var (
	litTrue  = []byte("true")
	litFalse = []byte("false")
	litNull  = []byte("null")
)

// memberValue checks a member's key and colon at b[i:] and returns where
// its value starts, or -1.
func memberValue(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = strictStringEnd(b, i); i < 0 {
		return -1
	}
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	for i++; i < len(b) && isSpace(b[i]); i++ {
	}
	return i
}

// Eight bytes at a time: a word holds a quote, a backslash or a control
// character where one of its bytes is zero once xored with the quote or
// the backslash, or is below 0x20. The bit tricks (Hacker's Delight, 6-1)
// set the high bit of such bytes; above the first one a borrow may set
// others, so only the lowest is read.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

func stringSpecials(w uint64) uint64 {
	q, bs := w^(ones*'"'), w^(ones*'\\')
	return ((q-ones)&^q | (bs-ones)&^bs | (w-ones*0x20)&^w) & highs
}

// nextStringSpecial returns the index of the first quote, backslash or
// control character in b[j:], or len(b).
func nextStringSpecial(b []byte, j int) int {
	for ; j+8 <= len(b); j += 8 {
		if m := stringSpecials(binary.LittleEndian.Uint64(b[j:])); m != 0 {
			return j + bits.TrailingZeros64(m)/8
		}
	}
	for ; j < len(b); j++ {
		if c := b[j]; c == '"' || c == '\\' || c < 0x20 {
			return j
		}
	}
	return j
}

// strictStringEnd returns the index just past the string whose opening
// quote is at b[i], or -1 if it is not terminated, holds a control
// character, or an escape JSON does not have.
func strictStringEnd(b []byte, i int) int {
	for j := i + 1; ; {
		if j = nextStringSpecial(b, j); j >= len(b) {
			return -1
		}
		switch b[j] {
		case '"':
			return j + 1
		case '\\':
			if j+1 >= len(b) {
				return -1
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(b) || !isHex(b[j+2]) || !isHex(b[j+3]) || !isHex(b[j+4]) || !isHex(b[j+5]) {
					return -1
				}
				j += 6
			default:
				return -1
			}
		default: // a control character
			return -1
		}
	}
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// numberEnd returns the index just past the number at b[i] in JSON's
// grammar (-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?), or -1.
func numberEnd(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i = digitsEnd(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if i = digitsEnd(b, i+1); i < 0 {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i = digitsEnd(b, i); i < 0 {
			return -1
		}
	}
	return i
}

// digitsEnd returns the index just past one or more digits at b[i], or -1.
func digitsEnd(b []byte, i int) int {
	j := i
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}
