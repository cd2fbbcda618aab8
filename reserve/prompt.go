package reserve

import (
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"unicode/utf8"
)

// Prompt estimates in O(1). The BPE tokenizer costs about 0.3 µs a token,
// so a 100 000-token prompt (long-context and agent traffic) would cost
// tens of milliseconds of CPU before its first decision. A prompt's text
// larger than ExactBytes is estimated instead as its bytes times a
// tokens-per-byte ratio. The ratio is learned per (tenant, model, script)
// from the prompt tokens the provider reports at settlement; before the
// first report, it is the tokenizer's ratio on the first SampleBytes of the
// text, counted once per key. Small texts are counted exactly, where the
// tokenizer is cheap. Two-phase settlement keeps the windows exact whatever
// the estimate: it only decides how much is reserved while the call runs.

const (
	// ExactBytes: prompts of at most this many text bytes are counted
	// with the tokenizer (about 75 µs at the most).
	ExactBytes = 1024
	// MediaTokens is what an image, audio or file part of a prompt is
	// reserved: none of it is text to count. About a 1024×1024 image's
	// cost (OpenAI at high detail 765, Anthropic 1 398); the provider's
	// report settles it. Reserved nothing, forty images in one request
	// would be a fortieth of what the provider bills.
	MediaTokens = 1000
	// SampleBytes is the sample the tokenizer counts for a key's first
	// ratio.
	SampleBytes = 1024
	// scriptProbe is how many leading bytes Script looks at.
	scriptProbe = 256
	// ratioAlpha weighs a settled request in a key's ratio: after 3
	// reports the sample's prior weighs 34 %, after 6 12 %.
	ratioAlpha = 0.3
	// maxRatioKeys and maxModelsPerTenant bound the learned ratios.
	maxRatioKeys       = 1 << 16
	maxModelsPerTenant = 2 * DefaultModelsPerTenant // a ratio per script
	// maxRatio: a report of more tokens a byte is not the text's.
	maxRatio = 1.0
)

// minRatio is the least tokens a byte an estimate assumes, by script: about
// English prose's with o200k (0.20; code 0.25–0.3) and CJK's (0.24 with
// o200k, 0.36 with cl100k). Sparser text (runs of spaces) is over-reserved,
// and credited back at settlement; denser text (random strings, 0.7) is
// under-reserved until its reports teach its ratio.
var minRatio = [...]float64{Latin: 0.20, Wide: 0.22}

// Script is the kind of text a ratio is learned for: tokens per byte differ
// between ASCII-heavy text (English, code) and multi-byte scripts (CJK:
// 0.20 against 0.24 tokens a byte with o200k on this package's samples,
// 0.20 against 0.36 with cl100k), so one tenant's mixed traffic keeps two
// ratios.
type Script uint8

const (
	Latin Script = iota // mostly single-byte UTF-8
	Wide                // half or more of the bytes are multi-byte UTF-8
)

// ScriptOf classifies text by its first scriptProbe bytes.
func ScriptOf(text string) Script {
	n := min(len(text), scriptProbe)
	high := 0
	for i := range n {
		if text[i] >= utf8.RuneSelf {
			high++
		}
	}
	if 2*high >= n && n > 0 {
		return Wide
	}
	return Latin
}

// RatioKey names one learned ratio.
type RatioKey struct {
	Tenant, Model string
	Script        Script
}

// Ratios are learned tokens-per-byte ratios. Safe for concurrent use; a
// lookup takes one shared lock and allocates nothing.
type Ratios struct {
	mu        sync.RWMutex
	m         map[RatioKey]*ewma
	perTenant map[string]int
}

// NewRatios returns an empty set of ratios.
func NewRatios() *Ratios {
	return &Ratios{m: make(map[RatioKey]*ewma), perTenant: make(map[string]int)}
}

// Ratio is k's learned ratio; false when it has none yet.
func (r *Ratios) Ratio(k RatioKey) (float64, bool) {
	r.mu.RLock()
	a := r.m[k]
	r.mu.RUnlock()
	if a == nil {
		return 0, false
	}
	return a.load()
}

// Learn records that bytes of k's text were tokens tokens (as the
// provider reported, or as the tokenizer counted a sample).
func (r *Ratios) Learn(k RatioKey, bytes, tokens int) {
	if bytes <= 0 || tokens <= 0 {
		return
	}
	// More than a token a byte is not the text's tokens alone (images,
	// audio, history held by the provider) or a bogus report: learned as
	// a token a byte, the most any text makes. Dropped, it would teach
	// nothing, and a ratio taught low would stay low however dense the
	// next prompts (a 245 KB dense prompt with one image would be reserved
	// a fifth of its tokens in every window).
	x := min(float64(tokens)/float64(bytes), maxRatio)
	if a := r.entry(k); a != nil {
		a.addWeighted(x, ratioAlpha)
	}
}

// entry is k's ratio, made if missing; nil past maxRatioKeys, past
// maxModelsPerTenant for k's tenant, or for a model name over
// MaxModelNameLen (model names are the client's: such keys are estimated
// from their own sample each time, and learn nothing).
func (r *Ratios) entry(k RatioKey) *ewma {
	r.mu.RLock()
	a := r.m[k]
	r.mu.RUnlock()
	if a != nil {
		return a
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if a = r.m[k]; a != nil {
		return a
	}
	if len(r.m) >= maxRatioKeys || r.perTenant[k.Tenant] >= maxModelsPerTenant || len(k.Model) > MaxModelNameLen {
		return nil
	}
	// Copies: the request's strings share its whole body.
	k.Tenant, k.Model = strings.Clone(k.Tenant), strings.Clone(k.Model)
	a = &ewma{}
	r.m[k] = a
	r.perTenant[k.Tenant]++
	return a
}

// Estimate is how many tokens texts make, size bytes in all, largest being
// the largest piece: their learned ratio times size, or, for a key without
// one, the tokenizer's ratio on a sample of largest, which becomes the
// key's first; or the ratio of a probe of the texts themselves when it is
// much denser. Callers count texts of at most ExactBytes with the
// tokenizer instead.
func (r *Ratios) Estimate(tok *Tokenizer, k RatioKey, texts []string, size int, largest string) int {
	ratio, ok := r.Ratio(k)
	if !ok {
		sample := Sample(largest)
		n := tok.Count(k.Model, sample)
		r.Learn(k, len(sample), n)
		ratio = float64(n) / float64(max(1, len(sample)))
	}
	// Never below a floor that no ordinary text of the script comes
	// under: a tenant that teaches a low ratio (a run of prompts of
	// spaces) cannot get dense prompts reserved at next to nothing.
	ratio = max(ratio, minRatio[k.Script])
	// Nor much below what this prompt's own text makes where a probe
	// looks: a ratio is learned from the tenant's earlier prompts, and a
	// sample from fixed places can be steered: a ratio taught low with one
	// sparse prompt, or a prompt sparse only where the first sample looks,
	// then two dense prompts at once, each estimated under half the limit,
	// would take 4.9 times the tenant's tpm to the provider in one window.
	if p := probe(tok, k.Model, texts, size); p > probeMargin*ratio {
		ratio = p
	}
	return int(math.Ceil(ratio * float64(size)))
}

const (
	// probeWindows windows of probeBytes of the prompt, at random places,
	// are counted with the tokenizer for each estimate (a few µs): random,
	// so that a prompt cannot be sparse where they look and dense
	// elsewhere without most of it being sparse.
	probeWindows = 2
	probeBytes   = 32
	// probeMargin: the probe's ratio replaces the learned one when it is
	// this much denser. A window cut mid-word counts a token or so more
	// than its share, and a line of digits or punctuation is denser than
	// the prose around it: ordinary text keeps its learned ratio (1.5
	// put English estimates 79 % high in TestRatioEstimateAccuracy), while
	// a prompt that would be under-reserved more than twice is caught
	// (dense strings make 3 to 5 times prose's tokens a byte).
	probeMargin = 2.0
)

// probe is the tokens a byte of probeWindows windows of texts (size bytes
// in all), each at a random byte of the whole; 0 when there is no text.
// Each window is counted apart: joined, the pieces across the seam would
// be new ones every time, for the library to count (a µs each). A window
// starts and ends where it falls, mid-word as a rule: moved to the words'
// edges (whose pieces the tokenizer has counted before, where its cut ends
// are new) it could be steered off dense words between short sparse ones
// (caught 60 % of the time instead of 99 %).
func probe(tok *Tokenizer, model string, texts []string, size int) float64 {
	if size <= 0 {
		return 0
	}
	tokens, bytes := 0, 0
	for range probeWindows {
		at := rand.IntN(size)
		for _, text := range texts {
			if at >= len(text) {
				at -= len(text)
				continue
			}
			w := probeWindow(text, at)
			tokens += tok.countUncached(model, w)
			bytes += len(w)
			break
		}
	}
	if bytes == 0 {
		return 0
	}
	return float64(tokens) / float64(bytes)
}

// probeWindow is the probe's window at byte at of text.
func probeWindow(text string, at int) string { return window(text, at, probeBytes) }

// window is about n bytes of text from at, moved back to a rune's start at
// both ends; never empty when text is not.
func window(text string, at, n int) string {
	lo := min(max(at, 0), len(text))
	for lo > 0 && lo < len(text) && !utf8.RuneStart(text[lo]) {
		lo--
	}
	hi := min(len(text), lo+n)
	for hi > lo+1 && hi < len(text) && !utf8.RuneStart(text[hi]) {
		hi--
	}
	if hi <= lo {
		hi = min(len(text), lo+1)
	}
	return text[lo:hi]
}

// Len is how many ratios are kept.
func (r *Ratios) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.m)
}

// Sample is SampleBytes of text: its head, middle and tail, each cut at a
// rune's start, so that a prompt whose head is unlike the rest (a run of
// spaces, a header) does not set its key's first ratio alone.
func Sample(text string) string {
	if len(text) <= SampleBytes {
		return text
	}
	part := SampleBytes / 3
	return window(text, 0, part) + window(text, len(text)/2-part/2, part) + window(text, len(text)-part, part)
}
