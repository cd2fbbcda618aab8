package upstream

import "github.com/tidwall/gjson"

// CompletionText calls fn with each piece of generated text in a JSON answer,
// for counting tokens when the provider reported no usage.
func CompletionText(ep Endpoint, answer []byte, fn func(text []byte)) {
	var paths []string
	switch ep {
	case Chat:
		paths = []string{"choices.#.message.content", "choices.#.message.refusal", "choices.#.message.reasoning_content",
			"choices.#.message.tool_calls.#.function.arguments", "choices.#.message.function_call.arguments"}
	case Completions:
		paths = []string{"choices.#.text"}
	case Messages:
		// tool_use input is an object: its JSON is what was generated.
		paths = []string{"content.#.text", "content.#.thinking", "content.#.input"}
	case Responses:
		paths = []string{"output.#.content.#.text", "output.#.arguments", "output.#.summary.#.text"}
	default:
		return
	}
	for _, r := range gjson.GetManyBytes(answer, paths...) {
		eachText(r, fn)
	}
}

// eachText calls fn with every string in v (arrays walked, as a path
// through several arrays nests them) and the JSON of every object.
func eachText(v gjson.Result, fn func(text []byte)) {
	switch {
	case v.IsArray():
		v.ForEach(func(_, e gjson.Result) bool {
			eachText(e, fn)
			return true
		})
	case v.Type == gjson.String:
		if v.Str != "" {
			fn([]byte(v.Str))
		}
	case v.IsObject():
		fn([]byte(v.Raw))
	}
}
