package reserve

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"strings"
	"testing"
)

func TestScriptOf(t *testing.T) {
	for _, tc := range []struct {
		text string
		want Script
	}{
		{"", Latin},
		{"Hello, world. The quick brown fox.", Latin},
		{"func main() { fmt.Println(\"héllo\") }", Latin},
		{"在大型语言模型服务的前面放置一个网关", Wide},
		{"東京の天気は晴れです。", Wide},
		{"Résumé: naïve café — déjà vu", Latin},
		{strings.Repeat("a", 300) + "漢字", Latin}, // only the first bytes count
	} {
		if got := ScriptOf(tc.text); got != tc.want {
			t.Errorf("ScriptOf(%.20q) = %d, want %d", tc.text, got, tc.want)
		}
	}
}

// corpus builds n prompts of one kind of text, each a run of random
// pieces of the sample, between 2 and 40 KiB.
func corpus(tb testing.TB, file string, n int, rng *rand.Rand) []string {
	tb.Helper()
	b, err := os.ReadFile("testdata/" + file)
	if err != nil {
		tb.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	out := make([]string, n)
	for i := range out {
		size := 2048 + rng.Intn(38*1024)
		var sb strings.Builder
		for sb.Len() < size {
			sb.WriteString(lines[rng.Intn(len(lines))])
		}
		out[i] = sb.String()
	}
	return out
}

// After a few settled requests, the estimate of a prompt from its size is
// within 10 % of the tokenizer's exact count, on English, code and CJK
// text, for both encodings; and before any, the sample's ratio is the
// estimate.
func TestRatioEstimateAccuracy(t *testing.T) {
	tok := newTokenizer(t)
	for _, file := range []string{"prompt_en.txt", "prompt_code.txt", "prompt_cjk.txt"} {
		for _, model := range []string{"gpt-4o", "gpt-4"} {
			t.Run(file+"/"+model, func(t *testing.T) {
				rng := rand.New(rand.NewSource(1))
				prompts := corpus(t, file, 23, rng)
				r := NewRatios()
				k := RatioKey{Tenant: "acme", Model: model, Script: ScriptOf(prompts[0])}
				worstFirst, worst := 0.0, 0.0
				for i, p := range prompts {
					est := r.Estimate(tok, k, []string{p}, len(p), p)
					exact := tok.Count(model, p)
					err := math.Abs(float64(est-exact)) / float64(exact)
					if i == 0 {
						worstFirst = err
					}
					if i >= 3 {
						worst = max(worst, err)
					}
					r.Learn(k, len(p), exact) // what the provider reports
				}
				t.Logf("%s %s: first estimate (sample) off by %.1f%%, after 3 settled at most %.1f%%", file, model, 100*worstFirst, 100*worst)
				if worst > 0.10 {
					t.Errorf("after 3 settled requests an estimate was off by %.1f%%, want <= 10%%", 100*worst)
				}
			})
		}
	}
}

// A tenant's CJK traffic does not skew its English estimates: one ratio
// per script, each estimate within 10 % with the two interleaved; with one
// shared ratio they would be off by the difference.
func TestRatioPerScript(t *testing.T) {
	tok := newTokenizer(t)
	rng := rand.New(rand.NewSource(2))
	en, cjk := corpus(t, "prompt_en.txt", 10, rng), corpus(t, "prompt_cjk.txt", 10, rng)
	r := NewRatios()
	worst := 0.0
	for i := range 10 {
		for _, p := range []string{en[i], cjk[i]} {
			k := RatioKey{Tenant: "acme", Model: "gpt-4", Script: ScriptOf(p)}
			est, exact := r.Estimate(tok, k, []string{p}, len(p), p), tok.Count("gpt-4", p)
			if i >= 3 {
				worst = max(worst, math.Abs(float64(est-exact))/float64(exact))
			}
			r.Learn(k, len(p), exact)
		}
	}
	le, _ := r.Ratio(RatioKey{"acme", "gpt-4", Latin})
	lc, _ := r.Ratio(RatioKey{"acme", "gpt-4", Wide})
	t.Logf("tokens per byte: English %.3f, CJK %.3f; worst estimate off by %.1f%%", le, lc, 100*worst)
	if r.Len() != 2 || worst > 0.10 {
		t.Errorf("%d ratios, worst estimate off by %.1f%%: want 2, <= 10%%", r.Len(), 100*worst)
	}
}

// A report of more than a token a byte (images, audio, history the
// provider holds, or a bogus count) is learned as a token a byte, the most
// any text makes; none teaches nothing. Such reports were dropped: a ratio
// taught low then never rose for prompts that carry an image.
func TestRatioClampsReports(t *testing.T) {
	r := NewRatios()
	k := RatioKey{"acme", "m", Latin}
	r.Learn(k, 1000, 250)
	r.Learn(k, 1000, 0)
	r.Learn(k, 0, 10)
	if got, _ := r.Ratio(k); got != 0.25 {
		t.Fatalf("ratio %v after reports of nothing, want 0.25", got)
	}
	r.Learn(k, 1000, 1_000_000) // learned as 1.0: 0.25 + 0.3 × 0.75
	if got, _ := r.Ratio(k); math.Abs(got-0.475) > 1e-9 {
		t.Errorf("ratio %v, want 0.475", got)
	}
}

// Client-chosen model names cannot grow the ratios without bound, nor
// fill them for other tenants: a tenant keeps at most maxModelsPerTenant.
func TestRatiosBounded(t *testing.T) {
	r := NewRatios()
	for i := range 5000 {
		r.Learn(RatioKey{Tenant: "acme", Model: fmt.Sprintf("m-%d", i), Script: Latin}, 1000, 250)
	}
	if n := r.Len(); n != maxModelsPerTenant {
		t.Fatalf("%d ratios after 5000 model names, want %d", n, maxModelsPerTenant)
	}
	r.Learn(RatioKey{Tenant: "other", Model: "m", Script: Latin}, 1000, 250)
	if _, ok := r.Ratio(RatioKey{Tenant: "other", Model: "m", Script: Latin}); !ok {
		t.Error("another tenant could not learn a ratio")
	}
}

// A tenant that teaches a low ratio with prompts of spaces does not get a
// dense prompt reserved at next to nothing: the floor holds.
func TestRatioFloor(t *testing.T) {
	tok := newTokenizer(t)
	r := NewRatios()
	k := RatioKey{"acme", "gpt-4o", Latin}
	spaces := strings.Repeat(" ", 20000)
	for range 5 {
		r.Estimate(tok, k, []string{spaces}, len(spaces), spaces)
		r.Learn(k, len(spaces), tok.Count("gpt-4o", spaces))
	}
	dense := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 2000)
	est, exact := r.Estimate(tok, k, []string{dense}, len(dense), dense), tok.Count("gpt-4o", dense)
	if float64(est) < 0.85*float64(exact) {
		t.Errorf("after prompts of spaces an English prompt is estimated at %d, exact %d", est, exact)
	}
}

// A prompt much denser than its key's learned ratio is estimated near its
// own density: the probe looks at it, at random places. Found by a
// reviewer: a ratio taught low with one sparse prompt, then dense prompts
// estimated at the floor (a fifth of their tokens); and a fresh key whose
// first sample (head, middle, tail) was sparse in a prompt dense
// everywhere else.
func TestEstimateProbesDensePrompts(t *testing.T) {
	tok := newTokenizer(t)
	dense := func(n int) string { // a token a byte with both encodings
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(1 + i*7%8)
		}
		return string(b)
	}
	sparse := strings.Repeat("internationalization ", 100)
	steered := sparse[:400] + dense(121_000) + sparse[:800] + dense(121_000) + sparse[:400]
	cases := []struct {
		name   string
		teach  string // a prompt settled first, its report learned
		prompt string
	}{
		{"ratio taught low", sparse, dense(245_000)},
		{"fresh key, sparse where the sample looks", "", steered},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRatios()
			k := RatioKey{Tenant: "acme", Model: "gpt-4o", Script: Latin}
			if tc.teach != "" {
				r.Learn(k, len(tc.teach), tok.Count("gpt-4o", tc.teach))
			}
			est, exact := r.Estimate(tok, k, []string{tc.prompt}, len(tc.prompt), tc.prompt), tok.Count("gpt-4o", tc.prompt)
			t.Logf("estimate %d, exact %d", est, exact)
			// A window may land on the sparse part (two windows: half
			// the probe's ratio at worst); the floor alone is a fifth.
			if est < exact/2 {
				t.Errorf("estimate %d for a prompt of %d tokens", est, exact)
			}
		})
	}
}

// Sample and the probe's windows stay inside a text that does not start
// on a rune (a reviewer's: Sample indexed text[-1]).
func TestSampleInvalidUTF8(t *testing.T) {
	text := strings.Repeat("\x80", SampleBytes*2)
	if s := Sample(text); len(s) == 0 || len(s) > SampleBytes {
		t.Errorf("sample of %d bytes", len(s))
	}
	for _, at := range []int{0, 1, len(text) / 2, len(text) - 1} {
		if w := window(text, at, probeBytes); len(w) == 0 || len(w) > probeBytes {
			t.Errorf("window at %d: %d bytes", at, len(w))
		}
	}
}
