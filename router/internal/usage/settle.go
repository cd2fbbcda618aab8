package usage

import (
	"errors"

	"github.com/ringgate/ringgate/reserve"
	"github.com/ringgate/ringgate/upstream"
)

// NewFilter is the filter c's stream from a provider of kind goes through. It hides the usage
// only from a client the gateway asked for it on behalf of: a JSON
// request answered with a stream gets the stream as the provider sent it.
func NewFilter(c Call, kind upstream.Kind) *upstream.StreamFilter {
	if c.Req.Endpoint == upstream.Responses {
		return upstream.NewResponsesFilter()
	}
	return upstream.NewStreamFilter(kind, !c.Req.UsageAdded())
}

// FilterWhole passes an SSE answer read whole (from a provider of kind)
// through c's filter, emit
// given each event it lets through, and gives what the call is charged.
// emit never fails here, nor does the filter.
func (k *Tokens) FilterWhole(c Call, kind upstream.Kind, body []byte, emit func(ev []byte) error) (u upstream.Usage, ok bool, completion int) {
	f := NewFilter(c, kind)
	_ = f.Write(body, emit)
	_ = f.Close(emit)
	return k.StreamUsage(c, f, !f.Partial())
}

// AnswerUsage reads a JSON answer's usage (from a provider of kind); without one, a successful
// answer's completion is counted.
func (k *Tokens) AnswerUsage(c Call, kind upstream.Kind, status int, answer []byte) (u upstream.Usage, ok bool, completion int) {
	ok = status >= 200 && status < 300
	u = upstream.UsageFromJSON(kind, answer)
	if ok && !u.Reported {
		completion = k.countCompletion(c, answer)
	}
	return u, ok, completion
}

// Failed is what a call that failed with err is charged: nothing when the
// provider did not answer; its reservation, or max_tokens on every choice
// if more, when it answered past the largest answer read
// (upstream.ErrAnswerTooLarge: it generated the answer and bills it:
// charged nothing, an answer of 60 500 tokens would be free, repeated at
// the rpm).
func Failed(c Call, err error) upstream.Usage {
	if !errors.Is(err, upstream.ErrAnswerTooLarge) {
		return upstream.Usage{}
	}
	// So large, it likely ran to max_tokens on every choice.
	completion := max(c.Res.Total-c.Res.Prompt, c.Req.MaxTokens*max(1, c.Req.Choices))
	return upstream.Usage{Prompt: c.Res.Prompt, Completion: completion, Reported: true}
}

// StreamUsage is what a stream that ended, its events through f, is
// charged: complete, its reported usage, or its counted text without one;
// cut, what was generated (its text counted), and it teaches nothing (ok
// false: it would bias the completion-length history low).
func (k *Tokens) StreamUsage(c Call, f *upstream.StreamFilter, complete bool) (u upstream.Usage, ok bool, completion int) {
	u = f.Usage()
	if !u.Reported || !complete {
		completion = k.tok.CountBytes(c.Req.Model, f.Text())
		if kept := len(f.Text()); kept > 0 && f.TextBytes() > kept {
			// Past MaxStreamText only the length was kept: the rest
			// is counted at the kept text's tokens per byte.
			completion = int(float64(completion) * float64(f.TextBytes()) / float64(kept))
		}
		if u.Reported && u.Completion > completion {
			completion = u.Completion
		}
	}
	if !complete {
		prompt := u.Prompt
		if !u.Reported || u.Prompt <= 0 {
			prompt = k.ExactPrompt(c)
		}
		return upstream.Usage{Prompt: prompt, Completion: completion, Reported: true}, false, 0
	}
	return u, true, completion
}

// Actual is what a call is charged for the answer it got: with usage
// reported, that is the truth; without it, a successful call is charged
// its prompt counted plus its counted completion, and a failed one nothing
// (no provider bills a refused call). A successful one teaches the
// estimator.
func (k *Tokens) Actual(c Call, u upstream.Usage, ok bool, countedCompletion int) int {
	var actual int
	switch {
	case u.Reported:
		actual = u.Prompt + u.Completion
		if c.Prompt.bytes > 0 && ok {
			// Only a complete call's report: a cut one's prompt may be
			// this node's own estimate (ExactPrompt).
			k.ratios.Learn(c.Prompt.key, c.Prompt.bytes, u.Prompt-c.Prompt.fixed)
		}
		if ok {
			k.learn(c, u.Prompt, u.Completion)
		}
	case ok:
		// No usage reported: the prompt counted, not estimated (a large
		// one's estimate rests on a learned ratio).
		prompt := k.ExactPrompt(c)
		actual = prompt + countedCompletion
		k.learn(c, prompt, countedCompletion)
	}
	return actual
}

// learn feeds a finished call's completion length to the estimator, per
// completion when the call asked for several.
func (k *Tokens) learn(c Call, prompt, completion int) {
	res := *c.Res
	if n := c.Req.Choices; n > 1 {
		res.Completion /= n
		completion /= n
	}
	if m := c.Req.MaxTokens; m > 0 && completion >= m &&
		completion < k.est.Estimate(res.Key, 0, 0, true).Completion {
		// Cut short by its max_tokens, below what a call without one
		// is reserved: a bound, not a length, it must not lower that.
		// Learned, calls with max_tokens 1 would teach an average of 1,
		// and calls without one would be reserved 2 tokens each (8 at
		// once, 20 times the tpm in a window). One cut above it still
		// teaches: ignored, calls that run to a max_tokens of 8 000
		// would be reserved 256 each (10 at once for a tpm of 10 000).
		return
	}
	k.est.Settle(res, reserve.Usage{Prompt: prompt, Completion: completion})
}

// countCompletion counts the completion text of a JSON answer that
// reported no usage.
func (k *Tokens) countCompletion(c Call, answer []byte) int {
	n := 0
	upstream.CompletionText(c.Req.Endpoint, answer, func(text []byte) {
		n += k.tok.CountBytes(c.Req.Model, text)
	})
	return n
}
