// Package usage counts a call's tokens: how many it reserves (its prompt,
// counted with the tokenizer or estimated from its bytes with a learned
// ratio, and its completion's guess) and how many it is settled at (the
// provider's reported usage, or its answer's text counted), and teaches
// the estimator and the ratios from what the provider reports.
//
// The package owns the tokenizer, the estimator and the ratios and the
// decisions made with them. It knows nothing of the router's calls,
// tenants, limiters or of HTTP: it is given the parsed request, its
// reservation and its prompt estimate (Call), and what it asks of a call's
// limiter is one small interface (Room).
package usage

import (
	"github.com/ringgate/ringgate/reserve"
	"github.com/ringgate/ringgate/upstream"
)

// Tokens are what a call's tokens are reserved with.
type Tokens struct {
	tok    *reserve.Tokenizer
	est    *reserve.Estimator
	ratios *reserve.Ratios // prompt tokens per byte (promptTokens)
}

// New makes the counting of calls with tok, a completion guessed at
// defaultCompletion until answers teach it.
func New(tok *reserve.Tokenizer, defaultCompletion int) *Tokens {
	return &Tokens{tok: tok, est: reserve.NewEstimator(defaultCompletion), ratios: reserve.NewRatios()}
}

// Tokenizer is the tokenizer the calls are counted with.
func (k *Tokens) Tokenizer() *reserve.Tokenizer { return k.tok }

// Prompt is how a call's prompt was estimated from its size, for the ratio
// to learn from what the provider reports (bytes 0: counted).
type Prompt struct {
	key          reserve.RatioKey
	bytes, fixed int
}

// Call is what the counting reads and writes of one call: its tenant's
// name, its parsed request, its reservation and how its prompt was
// estimated.
type Call struct {
	Tenant string
	Req    *upstream.Request
	Res    *reserve.Reservation
	Prompt *Prompt
}

// Room is what Estimate asks of the limiter a call is decided on.
type Room interface {
	// LimitTokens is its tokens per window (0: none).
	LimitTokens() int64
	// MayCount reports whether counting a large prompt is worth its
	// CPU: the call is not one its rpm refuses without waiting.
	MayCount() bool
}
