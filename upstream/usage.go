package upstream

// Usage is what a provider reported a call cost, in tokens. Prompt includes
// cached prompt tokens (Anthropic reports them apart: they are summed here).
// Reported is false when the provider said nothing about usage, in which case
// the counts are 0 and the caller must estimate.
type Usage struct {
	Prompt, Completion int
	Reported           bool
}

// UsageFromJSON reads the usage of a non-streamed answer (a JSON body):
// OpenAI usage.prompt_tokens and usage.completion_tokens (embeddings report
// only prompt_tokens; the Responses API usage.input_tokens and
// usage.output_tokens), or Anthropic usage.input_tokens plus
// usage.cache_creation_input_tokens plus usage.cache_read_input_tokens and
// usage.output_tokens. It does not allocate, and never fails: anything
// unreadable is just not Reported.
func UsageFromJSON(kind Kind, body []byte) Usage {
	it, ok := iterValue(body)
	if !ok || !it.obj {
		return Usage{}
	}
	for {
		k, v, ok := it.next()
		if !ok {
			return Usage{}
		}
		if string(k) != "usage" {
			continue
		}
		if kind == Anthropic {
			var a anthropicUsage
			if a.read(v) {
				return a.usage()
			}
			return Usage{}
		}
		u, _ := openAIUsage(v)
		return u
	}
}

// openAIUsage reads an OpenAI usage object; ok is false when v is not an
// object with a token count in it.
func openAIUsage(v []byte) (u Usage, ok bool) {
	it, isObj := iterValue(v)
	if !isObj || !it.obj {
		return Usage{}, false
	}
	for {
		k, v, more := it.next()
		if !more {
			break
		}
		switch string(k) {
		case "prompt_tokens", "input_tokens": // input_, output_: the Responses API's
			if n, isNum := tokenCount(v); isNum {
				u.Prompt, u.Reported = n, true
			}
		case "completion_tokens", "output_tokens":
			if n, isNum := tokenCount(v); isNum {
				u.Completion, u.Reported = n, true
			}
		}
	}
	return u, u.Reported
}

// anthropicUsage accumulates Anthropic usage fields. Streams report them in
// message_start and again (cumulatively) in message_delta: the counts only
// grow, so each field keeps the largest value reported (a message_delta
// with "input_tokens":0, as some compatible servers send, does not wipe the
// prompt message_start reported).
type anthropicUsage struct {
	input, cacheCreation, cacheRead, output int
	seen                                    bool
}

// read assigns every count present in the usage object v; ok is false when
// there is none.
func (a *anthropicUsage) read(v []byte) (ok bool) {
	it, isObj := iterValue(v)
	if !isObj || !it.obj {
		return false
	}
	for {
		k, v, more := it.next()
		if !more {
			break
		}
		var dst *int
		switch string(k) {
		case "input_tokens":
			dst = &a.input
		case "cache_creation_input_tokens":
			dst = &a.cacheCreation
		case "cache_read_input_tokens":
			dst = &a.cacheRead
		case "output_tokens":
			dst = &a.output
		default:
			continue
		}
		if n, isNum := tokenCount(v); isNum {
			*dst = max(*dst, n)
			ok = true
		}
	}
	a.seen = a.seen || ok
	return ok
}

func (a *anthropicUsage) usage() Usage {
	return Usage{
		Prompt:     a.input + a.cacheCreation + a.cacheRead,
		Completion: a.output,
		Reported:   a.seen,
	}
}
