package usage

import (
	"github.com/ringgate/ringgate/reserve"
)

// Estimate reserves c's tokens: its prompt, estimated or counted, and its
// completion's guess. limit is its tenant's configured tokens per window;
// room the limiter it is decided on.
func (k *Tokens) Estimate(c Call, limit int64, room Room) reserve.Reservation {
	req := c.Req
	key := reserve.Key{Tenant: c.Tenant, Model: req.Model}
	res := k.est.Estimate(key, k.promptTokens(c), req.MaxTokens, req.Generates)
	if c.Prompt.bytes > 0 {
		if l := room.LimitTokens(); l > 0 && (int64(res.Prompt) > l/2 || int64(res.Total) > l ||
			int64(c.Prompt.bytes+c.Prompt.fixed) > l) {
			// Near the limit on an estimate alone: counted, so that
			// neither a 429 "too large" nor an admission rests on it;
			// so is a prompt that could be over the limit alone (a text
			// makes at most a token a byte), so that one the probe
			// misjudged is never admitted whole. Not only a prompt
			// estimated over half the limit: a ratio learned from
			// denser text would make an English prompt "too large" with
			// its completion in every window, and a prompt half dense,
			// probed where it was sparse, would be admitted at more
			// than the limit on its own.
			// Not for a request its rpm refuses and that will not wait:
			// a refusal charges nothing, and counting a large prompt
			// costs up to a second of CPU (a tenant over its rpm could
			// spend it again and again). Only the rpm: its room comes
			// back with a bucket, not between this look and the
			// decision, as a freed slot can (the request would then be
			// admitted on the estimate this count is here to check).
			if room.MayCount() {
				res = k.est.Estimate(key, k.ExactPrompt(c), req.MaxTokens, req.Generates)
				c.Prompt.bytes = 0
			}
		}
	}
	if req.Choices > 1 {
		// n completions are generated and billed; history stays per completion.
		res.Completion *= req.Choices
		res.Total = res.Prompt + res.Completion
	}
	if req.Choices <= 1 && limit > 0 && int64(res.Total) > limit && int64(res.Prompt) < limit {
		// The completion's reservation is a guess from the tenant's
		// recent answers (max_tokens only caps it), and a guess past the
		// limit would refuse the request as too large for ever: a
		// refusal teaches no shorter average, with max_tokens above the
		// guess too. It reserves the whole limit instead and settles on
		// what the provider reports. Not with n completions asked for:
		// n of them are generated whatever each one's length. The
		// tenant's configured limit is read without the limiter's
		// lock: this runs per request.
		res.Completion = int(limit) - res.Prompt
		res.Total = int(limit)
	}
	return res
}

// promptTokens estimates c's prompt: its text counted with the local
// tokenizer when small, else its bytes times the ratio learned for its
// tenant, model and script (reserve.Ratios), plus the few tokens of
// framing every chat message costs.
func (k *Tokens) promptTokens(c Call) int {
	req := c.Req
	fixed := req.TokenInputs + req.Media*reserve.MediaTokens
	if req.Messages > 0 {
		fixed += 3*req.Messages + 3
	}
	if over := req.Uncounted - uncountedAllowance - uncountedPerMessage*req.Messages; over > 0 {
		// More of the body than JSON's syntax and parameters take is
		// neither counted text nor media: text in a field the parse
		// does not read (a new API field, a nested key given twice).
		// Reserved as text, so that it counts before the provider's
		// usage says what it cost: 54 KB so hidden would be admitted on
		// a reservation of a few tokens, 120 times the tenant's tpm over
		// a few windows.
		fixed += over / uncountedBytesPerToken
	}
	size, largest := 0, ""
	for _, text := range req.Texts {
		size += len(text)
		if len(text) > len(largest) {
			largest = text
		}
	}
	if size <= reserve.ExactBytes {
		n := fixed
		for _, text := range req.Texts {
			n += k.tok.Count(req.Model, text)
		}
		return n
	}
	key := reserve.RatioKey{Tenant: c.Tenant, Model: req.Model, Script: reserve.ScriptOf(largest)}
	*c.Prompt = Prompt{key: key, bytes: size, fixed: fixed}
	return fixed + k.ratios.Estimate(k.tok, key, req.Texts, size, largest)
}

// The bytes of a body that are neither counted text nor media that JSON's
// syntax and a request's parameters are allowed (the bench's chat body has
// 58; four messages with tools and an image 442), and how many of the
// rest make a token of the reservation (English text's usual 4).
const (
	uncountedAllowance     = 512
	uncountedPerMessage    = 64
	uncountedBytesPerToken = 4
)

// ExactPrompt is c's prompt as the tokenizer counts it: its estimate when
// it was counted, else counted now (off the decision's path), for a call
// that settles without the provider's count (a cut stream, a client gone):
// an estimate from the size must not become the charge.
func (k *Tokens) ExactPrompt(c Call) int {
	if c.Prompt.bytes == 0 {
		return c.Res.Prompt
	}
	n := c.Prompt.fixed
	for _, text := range c.Req.Texts {
		n += k.tok.Count(c.Req.Model, text)
	}
	return n
}
