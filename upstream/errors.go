package upstream

import (
	"unicode/utf8"
)

// ClientError is a request the gateway refuses before it reaches a provider.
// Status is the HTTP status to answer with (400 for everything ParseRequest
// rejects); Code is a machine-readable reason in OpenAI's style
// ("invalid_json", "missing_required_parameter", "invalid_type", ...); Param
// names the offending field, "" when none applies.
type ClientError struct {
	Status  int
	Code    string
	Message string
	Param   string
}

func (e *ClientError) Error() string {
	if e.Param != "" {
		return "upstream: invalid request: " + e.Param + ": " + e.Message
	}
	return "upstream: invalid request: " + e.Message
}

// Body renders the error in the dialect of kind: OpenAI's
// {"error":{...}} (see ErrorBody) or Anthropic's
// {"type":"error","error":{"type":...,"message":...}}.
func (e *ClientError) Body(kind Kind) []byte {
	typ := errorType(e.Status)
	if kind == Anthropic {
		return AnthropicErrorBody(e.Message, typ)
	}
	return ErrorBody(e.Message, typ, e.Code, e.Param)
}

func badRequest(code, param, msg string) *ClientError {
	return &ClientError{Status: 400, Code: code, Message: msg, Param: param}
}

// errorType is the error "type" both dialects use for an HTTP status.
func errorType(status int) string {
	switch {
	case status == 401:
		return "authentication_error"
	case status == 403:
		return "permission_error"
	case status == 404:
		return "not_found_error"
	case status == 413:
		return "request_too_large"
	case status == 429:
		return "rate_limit_error"
	case status >= 500:
		return "api_error"
	}
	return "invalid_request_error"
}

// ErrorBody renders an error in OpenAI's shape:
//
//	{"error":{"message":"…","type":"…","param":"…","code":"…"}}
//
// An empty param or code is rendered as null. Every string is JSON-escaped
// (invalid UTF-8 becomes U+FFFD), so any message can be passed.
func ErrorBody(message, typ, code string, param string) []byte {
	b := make([]byte, 0, 64+len(message)+len(typ)+len(code)+len(param))
	b = append(b, `{"error":{"message":`...)
	b = appendJSONString(b, message)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, typ)
	b = append(b, `,"param":`...)
	b = appendJSONStringOrNull(b, param)
	b = append(b, `,"code":`...)
	b = appendJSONStringOrNull(b, code)
	return append(b, "}}"...)
}

// AnthropicErrorBody renders an error in Anthropic's shape:
//
//	{"type":"error","error":{"type":"…","message":"…"}}
func AnthropicErrorBody(message, typ string) []byte {
	b := make([]byte, 0, 48+len(message)+len(typ))
	b = append(b, `{"type":"error","error":{"type":`...)
	b = appendJSONString(b, typ)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, message)
	return append(b, "}}"...)
}

func appendJSONStringOrNull(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return appendJSONString(b, s)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a quoted JSON string.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' { // valid JSON, but not valid JavaScript
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
