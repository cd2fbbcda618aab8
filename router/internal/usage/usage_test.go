package usage

import (
	"math"
	"strings"
	"testing"

	"github.com/ringgate/ringgate/reserve"
	"github.com/ringgate/ringgate/upstream"
)

// A large prompt is estimated from its size with the ratio the provider's
// reports teach at settlement; a small one is counted exactly.
func TestPromptEstimateLearnsFromSettlement(t *testing.T) {
	tok, err := reserve.NewTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	k := New(tok, 256)
	big := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 1000) // 45 000 bytes
	type call struct {
		req    upstream.Request
		res    reserve.Reservation
		prompt Prompt
	}
	newCall := func(text string) *call {
		return &call{req: upstream.Request{Model: "gpt-4o", Texts: []string{text}, Messages: 1}}
	}
	counts := func(c *call) Call { return Call{Tenant: "a", Req: &c.req, Res: &c.res, Prompt: &c.prompt} }
	small := newCall("hello there")
	if got, want := k.promptTokens(counts(small)), tok.Count("gpt-4o", "hello there")+6; got != want || small.prompt.bytes != 0 {
		t.Fatalf("small prompt: %d (bytes %d), want %d counted exactly", got, small.prompt.bytes, want)
	}
	c := newCall(big)
	first := k.promptTokens(counts(c)) // the sample's ratio
	if c.prompt.bytes != len(big) {
		t.Fatalf("a large prompt was not estimated from its size: %+v", c.prompt)
	}
	// The provider reports twice the sample's count (say, another
	// tokenizer): settlement teaches the ratio.
	reported := 2 * (first - c.prompt.fixed)
	for range 5 {
		c := newCall(big)
		k.promptTokens(counts(c))
		k.Actual(counts(c), upstream.Usage{Reported: true, Prompt: reported + c.prompt.fixed, Completion: 10}, true, 0)
	}
	got := k.promptTokens(counts(newCall(big))) - c.prompt.fixed
	if math.Abs(float64(got-reported)) > 0.1*float64(reported) {
		t.Errorf("after 5 settlements the estimate is %d, want about the reported %d (the sample said %d)", got, reported, first-c.prompt.fixed)
	}
}
