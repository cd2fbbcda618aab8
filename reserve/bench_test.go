package reserve

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// BenchmarkEstimate is the per-request hot path: estimate a prompt of 1k,
// 10k and 100k tokens, then the reservation. "ratio" is what the router
// does for a prompt over ExactBytes once its key has a ratio (its size
// times the ratio); "tokenizer" counts it exactly, as it did before.
func BenchmarkEstimate(b *testing.B) {
	tok := newTokenizer(b)
	base := loadPrompt(b) // 945 tokens (gpt-4o)
	e := NewEstimator(500)
	k := Key{"acme", "gpt-4o"}
	seed(e, k, 150, 3)
	for _, tokens := range []int{1_000, 10_000, 100_000} {
		prompt := strings.Repeat(base, max(1, tokens/945))
		rk := RatioKey{"acme", "gpt-4o", ScriptOf(prompt)}
		r := NewRatios()
		exact := tok.Count("gpt-4o", prompt)
		r.Learn(rk, len(prompt), exact)
		b.Run(fmt.Sprintf("%dk/ratio", tokens/1000), func(b *testing.B) {
			b.ReportAllocs()
			var res Reservation
			for b.Loop() {
				n := r.Estimate(tok, RatioKey{"acme", "gpt-4o", ScriptOf(prompt)}, []string{prompt}, len(prompt), prompt)
				res = e.Estimate(k, n, 2000, true)
			}
			b.ReportMetric(float64(res.Prompt), "tokens")
			b.ReportMetric(float64(exact), "exact")
		})
		b.Run(fmt.Sprintf("%dk/tokenizer", tokens/1000), func(b *testing.B) {
			var res Reservation
			fresh := &Tokenizer{} // remembers nothing: every prompt counted
			for b.Loop() {
				res = e.Estimate(k, fresh.Count("gpt-4o", prompt), 2000, true)
			}
			b.ReportMetric(float64(res.Prompt), "tokens")
		})
	}
}

// BenchmarkEstimateOnly is Estimate alone, on a key with history.
func BenchmarkEstimateOnly(b *testing.B) {
	e := NewEstimator(500)
	k := Key{"acme", "gpt-4o"}
	seed(e, k, 150, 3)
	b.ReportAllocs()
	for b.Loop() {
		e.Estimate(k, 945, 2000, true)
	}
}

// BenchmarkEstimateParallel runs Estimate from all Ps over 1000 tenants.
func BenchmarkEstimateParallel(b *testing.B) {
	e := NewEstimator(500)
	keys := make([]Key, 1000)
	for i := range keys {
		keys[i] = Key{fmt.Sprintf("tenant-%d", i), "gpt-4o"}
		seed(e, keys[i], 150, 1)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			e.Estimate(keys[i%len(keys)], 945, 2000, true)
			i++
		}
	})
}

// BenchmarkSettle is the settlement of an existing history (EWMA update).
func BenchmarkSettle(b *testing.B) {
	e := NewEstimator(500)
	k := Key{"acme", "gpt-4o"}
	seed(e, k, 150, 3)
	r := e.Estimate(k, 945, 2000, true)
	b.ReportAllocs()
	for b.Loop() {
		e.Settle(r, Usage{945, 150})
	}
}

// BenchmarkCount is the tokenizer on a short chat message: counted (its
// pieces, words, counted before: a prompt not seen before in a language
// seen before), found among the counts it remembers, and counted by the
// library alone (what the tokenizer did before it cut the pieces itself);
// then 4 KiB of random base64 a time, whose pieces are mostly new.
func BenchmarkCount(b *testing.B) {
	const text = "You are a helpful assistant. Answer in one short paragraph."
	b.Run("counted", func(b *testing.B) {
		fresh := &Tokenizer{}
		b.ReportAllocs()
		for b.Loop() {
			fresh.Count("gpt-4o", text)
		}
	})
	b.Run("remembered", func(b *testing.B) {
		tok := newTokenizer(b)
		tok.Count("gpt-4o", text)
		b.ReportAllocs()
		for b.Loop() {
			tok.Count("gpt-4o", text)
		}
	})
	b.Run("library", func(b *testing.B) {
		codec, err := codecFor(true)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			codec.Count(text)
		}
	})
	b.Run("base64-4KiB", func(b *testing.B) {
		raw := make([]byte, 3<<20)
		rng := rand.New(rand.NewPCG(5, 6))
		for i := range raw {
			raw[i] = byte(rng.Uint32())
		}
		pool := base64.StdEncoding.EncodeToString(raw)
		fresh := &Tokenizer{}
		at, tokens := 0, 0
		b.ReportAllocs()
		for b.Loop() {
			if at+4096 > len(pool) {
				at = 0
			}
			tokens = fresh.Count("gpt-4o", pool[at:at+4096])
			at += 4096
		}
		b.ReportMetric(float64(tokens), "tokens")
	})
}

// BenchmarkCountLineBreaks counts a run of white space broken by line
// breaks, " \n" 16 384 times (32 KiB): each piece reads the run up to its
// own line break only (a reviewer's: reading the whole run for each piece
// took a second, quadratic; the library's own matcher is quadratic too).
func BenchmarkCountLineBreaks(b *testing.B) {
	text := strings.Repeat(" \n", 16<<10)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		count(text, false)
	}
}
