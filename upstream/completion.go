package upstream

import "github.com/tidwall/gjson"

// CompletionText calls fn with each piece of generated text in a JSON answer,
// for counting tokens when the provider reported no usage.
func CompletionText(ep Endpoint, answer []byte, fn func(text []byte)) {
	var path string
	switch ep {
	case Chat:
		path = "choices.#.message.content"
	case Completions:
		path = "choices.#.text"
	case Messages:
		path = "content.#.text"
	case Responses:
		path = "output.#.content.#.text|@flatten"
	default:
		return
	}
	gjson.GetBytes(answer, path).ForEach(func(_, v gjson.Result) bool {
		if v.Type == gjson.String && v.Str != "" {
			fn([]byte(v.Str))
		}
		return true
	})
}
