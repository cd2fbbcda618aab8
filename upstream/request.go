package upstream

import (
	"bytes"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/tidwall/sjson"
)

// Request is what the gateway needs to know about a client's request before
// it forwards it: enough to estimate its cost and to prepare it.
type Request struct {
	Endpoint Endpoint
	Model    string
	Stream   bool
	// MaxTokens is the client's cap on generated tokens, 0 when absent:
	// max_tokens, or for OpenAI chat max_completion_tokens when given (it
	// wins over the deprecated max_tokens), or for Responses
	// max_output_tokens. Always set for Messages.
	MaxTokens int
	// Choices is how many completions the provider generates and bills:
	// OpenAI's n (or best_of on /v1/completions, if larger); 1 when absent,
	// 0 for embeddings. A reservation should be MaxTokens*Choices.
	Choices int
	// ClientWantsUsage: OpenAI stream_options.include_usage is true in the
	// client's own body (so the usage chunk must reach it).
	ClientWantsUsage bool
	// Texts are the pieces of prompt text to tokenize: message contents
	// (strings or text parts, tool calls' arguments, tool results), the
	// Anthropic system prompt, prompt/input strings, and the raw JSON of tool
	// definitions (which providers also bill as prompt tokens). Images and
	// audio are not counted. The strings share one copy of the body.
	Texts []string
	// Media is the number of image, audio and file parts: billed as
	// prompt tokens, hundreds or thousands each, that no text shows.
	Media int
	// TokenInputs counts the tokens given directly as integer arrays in
	// prompt (completions) or input (embeddings).
	TokenInputs int
	// Messages is the number of messages, for the per-message overhead.
	Messages int
	// Uncounted is how many bytes of the body are neither counted text
	// (Texts, TokenInputs) nor media: JSON's own syntax, parameters, and
	// whatever text sits in a field the parse does not read (a new API
	// field, a nested key given twice, of which a provider reads the
	// last). The reservation counts them past an allowance for syntax, so
	// that text the parse misses is still reserved.
	Uncounted int
	// Generates is false for embeddings, which produce no completion tokens.
	Generates bool
	// streamOptions: the body has a top-level stream_options (PrepareBody
	// merges into it; without one it appends its own).
	streamOptions bool
}

const (
	maxMaxTokens = 10_000_000
	maxChoices   = 128
	maxJSONDepth = 256
)

// The top-level fields ParseRequest reads. A body that repeats one of them is
// refused: JSON parsers disagree on which copy wins, and the gateway must
// count the same request the provider runs.
const (
	fModel = iota
	fStream
	fMaxTokens
	fMaxCompletionTokens
	fMessages
	fSystem
	fPrompt
	fInput
	fStreamOptions
	fTools
	fFunctions
	fN
	fBestOf
	fInstructions
	fMaxOutputTokens
	fSuffix
	fBackground
	fPrediction
	numFields
)

var fieldNames = [numFields]string{
	fModel:               "model",
	fStream:              "stream",
	fMaxTokens:           "max_tokens",
	fMaxCompletionTokens: "max_completion_tokens",
	fMessages:            "messages",
	fSystem:              "system",
	fPrompt:              "prompt",
	fInput:               "input",
	fStreamOptions:       "stream_options",
	fTools:               "tools",
	fFunctions:           "functions",
	fN:                   "n",
	fBestOf:              "best_of",
	fInstructions:        "instructions",
	fMaxOutputTokens:     "max_output_tokens",
	fSuffix:              "suffix",
	fBackground:          "background",
	fPrediction:          "prediction",
}

func fieldIndex(k string) int {
	switch k {
	case "model":
		return fModel
	case "stream":
		return fStream
	case "max_tokens":
		return fMaxTokens
	case "max_completion_tokens":
		return fMaxCompletionTokens
	case "messages":
		return fMessages
	case "system":
		return fSystem
	case "prompt":
		return fPrompt
	case "input":
		return fInput
	case "stream_options":
		return fStreamOptions
	case "tools":
		return fTools
	case "functions":
		return fFunctions
	case "n":
		return fN
	case "best_of":
		return fBestOf
	case "instructions":
		return fInstructions
	case "max_output_tokens":
		return fMaxOutputTokens
	case "suffix":
		return fSuffix
	case "background":
		return fBackground
	case "prediction":
		return fPrediction
	}
	return -1
}

// present reports a field that is there and not null (the APIs treat an
// explicit null like an absent optional field).
func present(v []byte) bool { return len(v) > 0 && !isNull(v) }

// A body checkJSON passed is read without a parse tree: a value is its raw
// bytes (a string with its quotes), nil when absent, walked with iter.
// Strings come from one copy of the body, src, so that the Request's
// strings do not hold the client's buffer.
type reqBody struct {
	b   []byte
	src string
	// counted and media are the bytes of the values counted as prompt
	// text (as the body has them: escapes and quotes included) and of
	// the media parts.
	counted, media int
}

// addText appends string value v's text, counted.
func (p *reqBody) addText(texts []string, v []byte) []string {
	p.counted += len(v)
	return appendText(texts, p.text(v))
}

// addRaw appends value v's raw JSON, counted.
func (p *reqBody) addRaw(texts []string, v []byte) []string {
	p.counted += len(v)
	return appendText(texts, p.raw(v))
}

// offset is where v, a slice of p.b (every value is one, cut from it with
// two-index slices, which keep its end), starts in p.b.
func (p *reqBody) offset(v []byte) int { return cap(p.b) - cap(v) }

// text is the decoded string v, "" for any other value.
func (p *reqBody) text(v []byte) string {
	if !isString(v) {
		return ""
	}
	if bytes.IndexByte(v, '\\') < 0 {
		off := p.offset(v)
		return p.src[off+1 : off+len(v)-1]
	}
	out, _ := appendString(make([]byte, 0, len(v)), v, len(v)) // decoding never lengthens
	return string(out)
}

// raw is v as the client wrote it.
func (p *reqBody) raw(v []byte) string {
	off := p.offset(v)
	return p.src[off : off+len(v)]
}

// each calls fn for each member of object v (its key decoded) or element
// of array v (key nil) until fn returns false; nothing for another value.
func each(v []byte, fn func(key, val []byte) bool) {
	it, ok := iterValue(v)
	if !ok {
		return
	}
	for {
		k, val, more := it.next()
		if !more || !fn(k, val) {
			return
		}
	}
}

// get is the first member of object v named key, nil when there is none
// or v is not an object.
func get(v []byte, key string) []byte {
	if !isObject(v) {
		return nil
	}
	var found []byte
	each(v, func(k, val []byte) bool {
		if string(k) == key {
			found = val
			return false
		}
		return true
	})
	return found
}

func isObject(v []byte) bool { return len(v) > 0 && v[0] == '{' }
func isArray(v []byte) bool  { return len(v) > 0 && v[0] == '[' }
func isBool(v []byte) bool   { return string(v) == "true" || string(v) == "false" }
func isNumber(v []byte) bool { return len(v) > 0 && (v[0] == '-' || v[0] >= '0' && v[0] <= '9') }

// ParseRequest validates a client's request body for endpoint ep and
// extracts what the gateway needs. A body the provider would certainly
// refuse is refused here with a *ClientError (status 400), before anything is
// reserved or sent. Fields the gateway does not read are left to the
// provider. It never panics, whatever the body.
func ParseRequest(ep Endpoint, body []byte) (Request, error) {
	if !ep.valid() {
		return Request{}, fmt.Errorf("upstream: ParseRequest: invalid endpoint %d", uint8(ep))
	}
	root, err := checkBody(body)
	if err != nil {
		return Request{}, err
	}
	// One copy of the body backs every string the Request keeps.
	p := reqParse{
		reqBody: reqBody{b: body, src: string(body)},
		r:       Request{Endpoint: ep, Generates: ep != Embeddings},
	}
	if err := p.topFields(root); err != nil {
		return Request{}, err
	}
	err = p.parse()
	return p.r, err
}

// checkBody refuses a body ParseRequest cannot walk (not JSON, nested too
// deep, not UTF-8, not an object) and returns its object.
func checkBody(body []byte) ([]byte, error) {
	switch checkJSON(body) {
	case jsonTooDeep:
		return nil, badRequest("invalid_json", "", "JSON body nests too deeply")
	case jsonMalformed:
		return nil, badRequest("invalid_json", "", "malformed JSON body")
	}
	// JSON text is UTF-8 (RFC 8259 §8.1), but checkJSON does not check the
	// bytes inside strings: a provider would refuse the body, or worse,
	// decode it otherwise than the tokenizer counts it. One pass, with an
	// ASCII fast path; the offset is only looked for on failure.
	if !utf8.Valid(body) {
		return nil, badRequest("invalid_json", "",
			fmt.Sprintf("body is not valid UTF-8 (first invalid byte at offset %d)", invalidUTF8At(body)))
	}
	root := body[skipWS(body, 0):]
	if !isObject(root) {
		return nil, badRequest("invalid_type", "", "body must be a JSON object")
	}
	return root, nil
}

// reqParse is one ParseRequest's state: the body (reqBody), the top-level
// fields the gateway reads, by field index (nil when absent), and the
// Request being filled, returned as far as it got when a check refuses the
// body.
type reqParse struct {
	reqBody
	f [numFields][]byte
	r Request
}

// topFields keeps the members of the body's object that the gateway reads,
// refusing one given twice.
func (p *reqParse) topFields(root []byte) error {
	dup := -1
	each(root, func(k, v []byte) bool {
		i := fieldIndex(string(k))
		if i < 0 {
			return true
		}
		if p.f[i] != nil {
			dup = i
			return false
		}
		p.f[i] = v
		return true
	})
	if dup >= 0 {
		return badRequest("duplicate_parameter", fieldNames[dup],
			fmt.Sprintf("%q appears more than once in the body", fieldNames[dup]))
	}
	return nil
}

// parse fills p.r from the fields topFields kept. The steps run in a fixed
// order: a body with several problems is refused for the first one met.
func (p *reqParse) parse() error {
	if err := p.params(); err != nil {
		return err
	}
	if err := p.prompt(); err != nil {
		return err
	}
	if v := p.f[fPrediction]; present(v) {
		// Predicted output: not read by the model as prompt (its
		// rejected tokens are billed as completion, within max_tokens).
		// Reserved as prompt, a predicted file would double the
		// reservation of an edit.
		p.media += len(v)
	}
	p.r.Uncounted = max(0, len(p.b)-p.counted-p.media)
	return nil
}

// params reads the parameters that come before the prompt: model, stream,
// the cap on generated tokens and the choices.
func (p *reqParse) params() error {
	switch m := p.f[fModel]; {
	case !present(m):
		return badRequest("missing_required_parameter", "model", "you must provide a model parameter")
	case !isString(m) || len(m) == 2:
		return badRequest("invalid_type", "model", "model must be a non-empty string")
	default:
		p.r.Model = p.text(m)
	}
	if s := p.f[fStream]; present(s) {
		if !isBool(s) {
			return badRequest("invalid_type", "stream", "stream must be a boolean")
		}
		p.r.Stream = string(s) == "true"
	}
	if err := p.maxTokens(); err != nil {
		return err
	}
	return p.choices()
}

// intField reads the integer field i (intParam), named as the body names it.
func (p *reqParse) intField(i, hi int) (int, error) {
	return intParam(p.f[i], fieldNames[i], 1, hi)
}

// maxTokens reads the cap on generated tokens each dialect names its own
// way (Request.MaxTokens).
func (p *reqParse) maxTokens() error {
	var err error
	switch p.r.Endpoint {
	case Chat:
		if p.r.MaxTokens, err = p.intField(fMaxTokens, maxMaxTokens); err != nil {
			return err
		}
		mct, err := p.intField(fMaxCompletionTokens, maxMaxTokens)
		if err != nil {
			return err
		}
		if mct > 0 {
			p.r.MaxTokens = mct
		}
	case Completions:
		p.r.MaxTokens, err = p.intField(fMaxTokens, maxMaxTokens)
	case Responses:
		p.r.MaxTokens, err = p.intField(fMaxOutputTokens, maxMaxTokens)
	case Messages:
		if !present(p.f[fMaxTokens]) {
			return badRequest("missing_required_parameter", "max_tokens", "max_tokens is required")
		}
		p.r.MaxTokens, err = p.intField(fMaxTokens, maxMaxTokens)
	}
	return err
}

// choices reads how many completions are generated (Request.Choices) and,
// on the OpenAI endpoints that take n, the stream options.
func (p *reqParse) choices() error {
	if p.r.Generates {
		p.r.Choices = 1
	}
	if ep := p.r.Endpoint; ep != Chat && ep != Completions {
		return nil
	}
	n, err := p.intField(fN, maxChoices)
	if err != nil {
		return err
	}
	p.r.Choices = max(p.r.Choices, n)
	if p.r.Endpoint == Completions {
		bo, err := p.intField(fBestOf, maxChoices)
		if err != nil {
			return err
		}
		p.r.Choices = max(p.r.Choices, bo)
	}
	return p.streamOptions()
}

// streamOptions reads whether the client asked for the usage chunk, and
// whether PrepareBody has a stream_options to merge into.
func (p *reqParse) streamOptions() error {
	so := p.f[fStreamOptions]
	p.r.streamOptions = so != nil // null included
	if !present(so) {
		return nil
	}
	if !isObject(so) {
		return badRequest("invalid_type", "stream_options", "stream_options must be an object")
	}
	var iu []byte
	dupIU := false
	each(so, func(k, v []byte) bool {
		if string(k) == "include_usage" {
			if iu != nil {
				dupIU = true
				return false
			}
			iu = v
		}
		return true
	})
	switch {
	case dupIU:
		return badRequest("duplicate_parameter", "stream_options.include_usage",
			`"include_usage" appears more than once in stream_options`)
	case present(iu) && !isBool(iu):
		return badRequest("invalid_type", "stream_options.include_usage",
			"stream_options.include_usage must be a boolean")
	}
	p.r.ClientWantsUsage = string(iu) == "true"
	return nil
}

// prompt reads what the model reads, as each endpoint gives it.
func (p *reqParse) prompt() error {
	switch p.r.Endpoint {
	case Chat, Messages:
		return p.messages()
	case Completions:
		// prompt is optional in practice: providers default it.
		if err := p.r.inputs(&p.reqBody, p.f[fPrompt], "prompt"); err != nil {
			return err
		}
		if v := p.f[fSuffix]; isString(v) {
			p.r.Texts = p.addText(p.r.Texts, v) // text after the completion, in the prompt
		}
	case Embeddings:
		if !present(p.f[fInput]) {
			return badRequest("missing_required_parameter", "input", "input is required")
		}
		return p.r.inputs(&p.reqBody, p.f[fInput], "input")
	case Responses:
		return p.responses()
	}
	return nil
}

// messages reads a chat or Messages request's messages, its system prompt
// (Messages) and its tools.
func (p *reqParse) messages() error {
	msgs := p.f[fMessages]
	switch {
	case !present(msgs):
		return badRequest("missing_required_parameter", "messages", "messages is required")
	case !isArray(msgs):
		return badRequest("invalid_type", "messages", "messages must be an array")
	}
	r := &p.r
	r.Texts = make([]string, 0, 8)
	bad := r.eachMessage(msgs, func(m []byte) {
		r.Texts = p.messageTexts(r.Texts, &r.Media, m)
	})
	switch {
	case bad >= 0:
		return badRequest("invalid_type", "messages["+strconv.Itoa(bad)+"]", "each message must be an object")
	case r.Messages == 0:
		return badRequest("invalid_value", "messages", "messages must not be empty")
	}
	if r.Endpoint == Messages {
		if err := p.system(); err != nil {
			return err
		}
	}
	p.tools()
	return nil
}

// system reads the Anthropic system prompt: a string or content blocks.
func (p *reqParse) system() error {
	switch s := p.f[fSystem]; {
	case !present(s):
	case isString(s):
		p.r.Texts = p.addText(p.r.Texts, s)
	case isArray(s):
		p.r.Texts = p.contentTexts(p.r.Texts, &p.r.Media, s, 0)
	default:
		return badRequest("invalid_type", "system", "system must be a string or an array of content blocks")
	}
	return nil
}

// tools counts the tool definitions as their raw JSON, and on chat the
// deprecated functions too.
func (p *reqParse) tools() {
	if v := p.f[fTools]; isArray(v) {
		p.r.Texts = p.addRaw(p.r.Texts, v)
	}
	if v := p.f[fFunctions]; p.r.Endpoint == Chat && isArray(v) {
		p.r.Texts = p.addRaw(p.r.Texts, v)
	}
}

// responses reads a Responses request's prompt: instructions, input, a
// stored prompt's variables, and tools.
func (p *reqParse) responses() error {
	if v := p.f[fBackground]; present(v) && string(v) != "false" {
		// Answered "queued" at once, generated and billed after:
		// the tokens cannot be counted when they are used, and the
		// answer is fetched with a GET ringgate does not serve: let
		// through, a call of 32 000 output tokens would be charged
		// its prompt alone.
		return badRequest("unsupported_parameter", "background",
			"Background responses are not supported through the gateway: send the request without background.")
	}
	if err := p.r.responsesInput(&p.reqBody, p.f[fInput], p.f[fInstructions]); err != nil {
		return err
	}
	if pr := p.f[fPrompt]; isObject(pr) {
		// A stored prompt's variables: text, or input parts
		// (an image is media, not 300 KB of text).
		each(get(pr, "variables"), func(_, v []byte) bool {
			switch {
			case isString(v):
				p.r.Texts = p.addText(p.r.Texts, v)
			case isObject(v):
				p.r.Texts = p.partTexts(p.r.Texts, &p.r.Media, v, 0)
			}
			return true
		})
	}
	p.tools()
	return nil
}

// responsesInput reads a Responses request's prompt: instructions (a
// string) and input (optional), a string or a list of items. An item is a message
// (role and content: a string or content parts), or another item the
// model reads (a function call's output, a previous output item): what
// text it has is counted, else its raw JSON.
func (r *Request) responsesInput(p *reqBody, input, instructions []byte) error {
	switch {
	case !present(instructions):
	case isString(instructions):
		r.Texts = p.addText(r.Texts, instructions)
	default:
		return badRequest("invalid_type", "instructions", "instructions must be a string")
	}
	switch {
	case !present(input):
		return nil // a stored prompt or a conversation may stand in for it
	case isString(input):
		r.Texts = p.addText(r.Texts, input)
		r.Messages = 1
		return nil
	case !isArray(input):
		return badRequest("invalid_type", "input", "input must be a string or an array of input items")
	}
	bad := r.eachMessage(input, func(item []byte) {
		switch output := get(item, "output"); {
		case get(item, "content") != nil:
			r.Texts = p.messageTexts(r.Texts, &r.Media, item)
		case isString(output):
			r.Texts = p.addText(r.Texts, output)
		case isArray(output):
			// A function call's output as content parts (text, images,
			// files): taken as raw JSON, its images would be reserved
			// nothing.
			r.Texts = p.contentTexts(r.Texts, &r.Media, output, 0)
		case isString(get(item, "arguments")):
			r.Texts = p.addText(r.Texts, get(item, "arguments"))
		default:
			r.Texts = p.addRaw(r.Texts, item)
		}
	})
	if bad >= 0 {
		return badRequest("invalid_type", "input["+strconv.Itoa(bad)+"]", "each input item must be an object")
	}
	return nil
}

// eachMessage calls fn for each element of array list, a request's
// messages or input items, counting them in r.Messages. It stops at one
// that is not an object and returns its index, -1 when all are.
func (r *Request) eachMessage(list []byte, fn func(m []byte)) int {
	bad := -1
	each(list, func(_, m []byte) bool {
		if !isObject(m) {
			bad = r.Messages
			return false
		}
		r.Messages++
		fn(m)
		return true
	})
	return bad
}

// invalidUTF8At is the offset of the first byte of b that does not start a
// valid UTF-8 sequence, or -1.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// intParam validates an optional integer parameter: absent or null reads as
// 0, anything else must be a plain JSON integer in [lo, hi].
func intParam(v []byte, name string, lo, hi int) (int, error) {
	if !present(v) {
		return 0, nil
	}
	if !isNumber(v) {
		return 0, badRequest("invalid_type", name, name+" must be an integer")
	}
	raw, neg := v, false
	if raw[0] == '-' {
		raw, neg = raw[1:], true
	}
	n := 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c < '0' || c > '9' {
			return 0, badRequest("invalid_type", name, name+" must be an integer")
		}
		if n <= hi {
			n = n*10 + int(c-'0')
		}
	}
	switch {
	case len(raw) == 0:
		return 0, badRequest("invalid_type", name, name+" must be an integer")
	case neg || n < lo:
		return 0, badRequest("integer_below_min_value", name,
			fmt.Sprintf("%s must be at least %d", name, lo))
	case n > hi:
		return 0, badRequest("integer_above_max_value", name,
			fmt.Sprintf("%s must be at most %d", name, hi))
	}
	return n, nil
}

// inputs reads a completions prompt or an embeddings input: a string, an
// array of strings, an array of token ids, or an array of arrays of token ids.
func (r *Request) inputs(p *reqBody, v []byte, name string) error {
	bad := func() error {
		return badRequest("invalid_type", name,
			name+" must be a string, an array of strings, an array of integers or an array of integer arrays")
	}
	switch {
	case !present(v):
		return nil
	case isString(v):
		r.Texts = p.addText(r.Texts, v)
		return nil
	case !isArray(v):
		return bad()
	}
	ok := true
	strs := p.counted
	each(v, func(_, e []byte) bool {
		switch {
		case isString(e):
			r.Texts = p.addText(r.Texts, e)
		case isNumber(e):
			r.TokenInputs++
		case isArray(e):
			each(e, func(_, t []byte) bool {
				ok = isNumber(t)
				r.TokenInputs++
				return ok
			})
		default:
			ok = false
		}
		return ok
	})
	if !ok {
		return bad()
	}
	if r.TokenInputs > 0 {
		// Token ids with their separators, whatever the spacing: all of
		// the array but its strings' bytes (counted as text already).
		p.counted += len(v) - (p.counted - strs)
	}
	return nil
}

func appendText(texts []string, s string) []string {
	if s == "" {
		return texts
	}
	return append(texts, s)
}

// messageTexts appends the text of one chat message (either dialect) and
// counts its media parts in media.
func (p *reqBody) messageTexts(texts []string, media *int, m []byte) []string {
	each(m, func(k, v []byte) bool {
		switch string(k) {
		case "content":
			texts = p.contentTexts(texts, media, v, 0)
		case "tool_calls": // OpenAI assistant message
			each(v, func(_, call []byte) bool {
				fn := get(call, "function")
				if n := get(fn, "name"); isString(n) {
					texts = p.addText(texts, n)
				}
				if a := get(fn, "arguments"); isString(a) {
					texts = p.addText(texts, a)
				}
				return true
			})
		case "refusal":
			if isString(v) {
				texts = p.addText(texts, v)
			}
		case "function_call": // OpenAI's deprecated form of tool_calls
			for _, k := range [2]string{"name", "arguments"} {
				if a := get(v, k); isString(a) {
					texts = p.addText(texts, a)
				}
			}
		}
		return true
	})
	return texts
}

// contentTexts appends the text of a message content or system prompt: a
// string, or an array of parts/blocks. Anthropic tool_result and
// search_result blocks and documents nest content of their own, followed to
// maxContentDepth. Media parts (images, audio, files) are counted in media.
func (p *reqBody) contentTexts(texts []string, media *int, c []byte, depth int) []string {
	switch {
	case isString(c):
		return p.addText(texts, c)
	case !isArray(c):
		return texts
	}
	each(c, func(_, part []byte) bool {
		texts = p.partTexts(texts, media, part, depth)
		return true
	})
	return texts
}

// partTexts appends the text of one content part (contentTexts).
func (p *reqBody) partTexts(texts []string, media *int, part []byte, depth int) []string {
	switch {
	case isString(part):
		return p.addText(texts, part)
	case !isObject(part):
		return texts
	}
	var typ, source []byte
	textSource := false
	before := p.counted
	each(part, func(k, v []byte) bool {
		switch string(k) {
		case "type":
			typ = v
		case "text", "thinking", "refusal", // refusal: an assistant's part
			"context", "title": // an Anthropic document's
			if isString(v) {
				texts = p.addText(texts, v)
			}
		case "input": // Anthropic tool_use: the arguments as JSON
			if isObject(v) {
				texts = p.addRaw(texts, v)
			}
		case "content": // Anthropic tool_result, search_result
			if depth < maxContentDepth {
				texts = p.contentTexts(texts, media, v, depth+1)
			}
		case "source": // Anthropic document: text, or content blocks
			source = v
			switch p.text(get(v, "type")) {
			case "text":
				texts, textSource = p.addText(texts, get(v, "data")), true
			case "content":
				if depth < maxContentDepth {
					texts, textSource = p.contentTexts(texts, media, get(v, "content"), depth+1), true
				}
			}
		}
		return true
	})
	if isMedia(p.text(typ)) && !textSource {
		*media++
		// Its bytes are the media's, but what was counted in it as
		// text (a document's context) is not subtracted twice; and
		// a part or source with a key given twice is left to
		// Uncounted: a provider that reads the last copy may see a
		// text document where the first said base64 (540 KB of text
		// could so pass as a PDF).
		if !dupKeys(part) && (source == nil || !dupKeys(source)) {
			p.media += len(part) - (p.counted - before)
		}
	}
	return texts
}

// dupKeys reports whether object o has a key more than once.
func dupKeys(o []byte) bool {
	var seen [16]string
	n, dup := 0, false
	each(o, func(k, _ []byte) bool {
		for _, s := range seen[:n] {
			if s == string(k) {
				dup = true
				return false
			}
		}
		if n == len(seen) {
			dup = true // a media part has a few keys: this many is suspect
			return false
		}
		seen[n] = string(k)
		n++
		return true
	})
	return dup
}

// maxContentDepth is how deep contentTexts follows content nested in
// content: an Anthropic search_result in a tool_result is two levels down
// (following one, its text would go uncounted).
const maxContentDepth = 3

// isMedia reports whether a content part of this type is an image, audio
// or a file (OpenAI chat and Responses, Anthropic): not text, and billed
// as prompt tokens of its own.
func isMedia(typ string) bool {
	switch typ {
	case "image_url", "input_audio", "file", // OpenAI chat
		"input_image", "input_file", // Responses
		"image", "document": // Anthropic
		return true
	}
	return false
}

// UsageAdded reports whether PrepareBody turns stream_options.include_usage
// on for r: a streamed OpenAI chat or completions request whose client did
// not. Only then does the StreamFilter hide the usage from the client.
func (r Request) UsageAdded() bool {
	return r.Stream && !r.ClientWantsUsage && (r.Endpoint == Chat || r.Endpoint == Completions)
}

// includeUsageField is what PrepareBody appends to a body without
// stream_options.
const includeUsageField = `,"stream_options":{"include_usage":true}`

// PrepareBody returns the body to send to the provider. For a streamed
// OpenAI chat or completions request it turns stream_options.include_usage
// on (merged into any stream_options the client sent, everything else left
// byte for byte), so the provider reports usage at the end of the stream;
// the StreamFilter hides that usage again from a client that did not ask for
// it. Any other body is returned as is, not copied.
func PrepareBody(r Request, body []byte) ([]byte, error) {
	if !r.UsageAdded() {
		return body, nil
	}
	if !r.streamOptions {
		// The common case, no stream_options: the field goes in before
		// the object's closing brace (the body is a valid JSON object
		// with a model, so one field at least precedes it), without
		// sjson's parse of the whole body.
		if end := bytes.LastIndexByte(body, '}'); end > 0 {
			out := make([]byte, 0, len(body)+len(includeUsageField))
			out = append(append(append(out, body[:end]...), includeUsageField...), body[end:]...)
			return out, nil
		}
	}
	out, err := sjson.SetBytes(body, "stream_options.include_usage", true)
	if err != nil {
		return nil, fmt.Errorf("upstream: setting stream_options.include_usage: %w", err)
	}
	return out, nil
}
