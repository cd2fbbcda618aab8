package upstream

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

func TestCheckJSON(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	deepObj := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	tests := []struct {
		body string
		want jsonProblem
	}{
		{`{}`, jsonOK},
		{` {"a" : [1, -0, 0.5e-3, 1E+9, true, false, null, "x\"\\\/\b\f\n\r\t\u00e9\uD83D"] } `, jsonOK},
		{`"` + strings.Repeat("abcdefgh", 9) + `"`, jsonOK},
		{`"été, 速率限制"`, jsonOK},
		{deep(maxJSONDepth), jsonOK},
		{deep(maxJSONDepth + 1), jsonTooDeep},
		{deepObj(maxJSONDepth), jsonOK},
		{deepObj(maxJSONDepth + 1), jsonTooDeep},
		{strings.Repeat("[", maxJSONDepth+1), jsonTooDeep}, // deep before it is cut
		{"[x" + deep(maxJSONDepth+1), jsonMalformed},       // the first problem met
		{``, jsonMalformed},
		{` `, jsonMalformed},
		{`{`, jsonMalformed},
		{`{"a":1,}`, jsonMalformed},
		{`[1,]`, jsonMalformed},
		{`{"a" 1}`, jsonMalformed},
		{`{1:2}`, jsonMalformed},
		{`{"a":1 "b":2}`, jsonMalformed},
		{`[] []`, jsonMalformed},
		{`[1}`, jsonMalformed},
		{`{"a":1]`, jsonMalformed},
		{`01`, jsonMalformed},
		{`1.`, jsonMalformed},
		{`.5`, jsonMalformed},
		{`1e`, jsonMalformed},
		{`-`, jsonMalformed},
		{`+1`, jsonMalformed},
		{`tru`, jsonMalformed},
		{`nulll`, jsonMalformed},
		{`"a` + "\t" + `b"`, jsonMalformed}, // a control character unescaped
		{"\"a\x00b\"", jsonMalformed},
		{`"\x"`, jsonMalformed},
		{`"\u00G0"`, jsonMalformed},
		{`"\u00"`, jsonMalformed},
		{`"abc`, jsonMalformed},
		{`"abcdefghijklmnop\`, jsonMalformed},
	}
	for _, tc := range tests {
		name := tc.body
		if len(name) > 40 {
			name = name[:40]
		}
		t.Run(name, func(t *testing.T) {
			if got := checkJSON([]byte(tc.body)); got != tc.want {
				t.Errorf("checkJSON = %d, want %d", got, tc.want)
			}
			if valid := json.Valid([]byte(tc.body)); tc.want != jsonTooDeep && valid != (tc.want == jsonOK) {
				t.Errorf("the case disagrees with encoding/json (Valid %v)", valid)
			}
		})
	}
}

// TestCheckJSONAgreesWithDecoder compares checkJSON with encoding/json on
// random values, whole and damaged: a byte changed, dropped or added, cut.
func TestCheckJSONAgreesWithDecoder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 30000 {
		b := randomJSON(rng, nil, 0)
		switch rng.IntN(5) {
		case 0:
			b[rng.IntN(len(b))] = jsonBytes[rng.IntN(len(jsonBytes))]
		case 1:
			at := rng.IntN(len(b))
			b = append(b[:at], b[at+1:]...)
		case 2:
			at := rng.IntN(len(b) + 1)
			b = append(b[:at], append([]byte{jsonBytes[rng.IntN(len(jsonBytes))]}, b[at:]...)...)
		case 3:
			b = b[:rng.IntN(len(b)+1)]
		}
		if got, want := checkJSON(b) == jsonOK, json.Valid(b); got != want {
			t.Fatalf("%q: checkJSON ok %v, encoding/json %v", b, got, want)
		}
	}
}

// jsonBytes are the bytes a damaged value gets: JSON's own, and ones it
// refuses.
const jsonBytes = "{}[]\",:\\ \t\n0123456789.eE+-tfnulrabx\x00\x1f\x7f\xc3\xa9/"

// randomJSON appends a random JSON value, with strings long and short,
// escaped and not, and whitespace, nesting at most 6 deep.
func randomJSON(rng *rand.Rand, b []byte, depth int) []byte {
	ws := func(b []byte) []byte {
		for range rng.IntN(2) {
			b = append(b, " \t\n\r"[rng.IntN(4)])
		}
		return b
	}
	b = ws(b)
	switch k := rng.IntN(9); {
	case k == 0 && depth < 6:
		b = append(b, '{')
		for m := range rng.IntN(4) {
			if m > 0 {
				b = append(b, ',')
			}
			b = append(ws(b), strconv.Quote("k"+strconv.Itoa(m))...)
			b = append(ws(b), ':')
			b = randomJSON(rng, b, depth+1)
		}
		b = append(ws(b), '}')
	case k == 1 && depth < 6:
		b = append(b, '[')
		for e := range rng.IntN(4) {
			if e > 0 {
				b = append(b, ',')
			}
			b = randomJSON(rng, b, depth+1)
		}
		b = append(ws(b), ']')
	case k <= 4:
		s := strings.Repeat("text, été 速率 ", rng.IntN(4)) + []string{"", `"`, `\`, "\n", "\u2028", "/", "\x01"}[rng.IntN(7)]
		q, _ := json.Marshal(s)
		b = append(b, q...)
	case k == 5:
		b = append(b, []string{"true", "false", "null"}[rng.IntN(3)]...)
	default:
		b = append(b, []string{"0", "-0", "12", "-3.25", "1e9", "2.5E-3", "7e+1"}[rng.IntN(7)]...)
	}
	return ws(b)
}

func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,"x\u00e9",null]}`, `[1,]`, `"\x"`, `01`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := checkJSON(b)
		if got == jsonTooDeep {
			return // encoding/json has no depth limit this low
		}
		if want := json.Valid(b); (got == jsonOK) != want {
			t.Fatalf("%q: checkJSON %d, encoding/json Valid %v", b, got, want)
		}
	})
}
