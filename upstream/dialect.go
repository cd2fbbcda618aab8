package upstream

import (
	"fmt"
	"strings"
)

// Kind is a provider's wire dialect.
//
// The zero Kind is OpenAI, the dialect every "OpenAI-compatible" provider
// speaks.
type Kind uint8

const (
	OpenAI    Kind = iota // OpenAI and OpenAI-compatible APIs
	Anthropic             // Anthropic's Messages API
)

// ParseKind maps a configuration name ("openai", "anthropic"; case and
// surrounding blanks ignored) to its Kind.
func ParseKind(s string) (Kind, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "openai":
		return OpenAI, nil
	case "anthropic":
		return Anthropic, nil
	}
	return 0, fmt.Errorf("upstream: unknown provider kind %q (want \"openai\" or \"anthropic\")", s)
}

func (k Kind) String() string {
	switch k {
	case OpenAI:
		return "openai"
	case Anthropic:
		return "anthropic"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Endpoint is one of the API endpoints the gateway proxies. The zero
// Endpoint is none of them.
type Endpoint uint8

const (
	Chat        Endpoint = iota + 1 // POST /v1/chat/completions (OpenAI)
	Completions                     // POST /v1/completions (OpenAI, legacy)
	Embeddings                      // POST /v1/embeddings (OpenAI)
	Messages                        // POST /v1/messages (Anthropic)
	Responses                       // POST /v1/responses (OpenAI Responses API)
)

var endpointPaths = [...]string{
	Chat:        "/v1/chat/completions",
	Completions: "/v1/completions",
	Embeddings:  "/v1/embeddings",
	Messages:    "/v1/messages",
	Responses:   "/v1/responses",
}

// EndpointFor maps a request path (without query string) to its Endpoint.
// The match is exact: no trailing slash, no other prefix.
func EndpointFor(path []byte) (Endpoint, bool) {
	switch string(path) { // no allocation: the compiler compares in place
	case "/v1/chat/completions":
		return Chat, true
	case "/v1/completions":
		return Completions, true
	case "/v1/embeddings":
		return Embeddings, true
	case "/v1/messages":
		return Messages, true
	case "/v1/responses":
		return Responses, true
	}
	return 0, false
}

// Path is the endpoint's request path, "" for an invalid Endpoint.
func (e Endpoint) Path() string {
	if int(e) < len(endpointPaths) {
		return endpointPaths[e]
	}
	return ""
}

// Kind is the dialect the endpoint belongs to.
func (e Endpoint) Kind() Kind {
	if e == Messages {
		return Anthropic
	}
	return OpenAI
}

func (e Endpoint) String() string {
	if p := e.Path(); p != "" {
		return p
	}
	return fmt.Sprintf("Endpoint(%d)", uint8(e))
}

func (e Endpoint) valid() bool { return e >= Chat && e <= Responses }
