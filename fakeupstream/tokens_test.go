package fakeupstream

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ringgate/ringgate/reserve"
)

// TestGeneratedTextTokens checks that a completion of n tokens counts as n
// tokens for the default counter and for real BPE tokenizers, whole or piece
// by piece.
func TestGeneratedTextTokens(t *testing.T) {
	tk, err := reserve.NewTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	// gpt-4 counts with cl100k_base, gpt-4o with o200k_base.
	for _, enc := range []string{"gpt-4", "gpt-4o"} {
		for _, w := range words {
			if n := tk.Count(enc, w); n != 1 {
				t.Errorf("%s: %q is %d tokens", enc, w, n)
			}
		}
		for _, n := range []int{1, 7, len(words), 200, 1000} {
			text := GeneratedText(n)
			if got := tk.Count(enc, text); got != n {
				t.Errorf("%s: %d-token completion counts %d", enc, n, got)
			}
			if got := defaultCountTokens("", text); got != n {
				t.Errorf("default counter: %d-token completion counts %d", n, got)
			}
		}
	}
}

func TestPromptTokens(t *testing.T) {
	tests := []struct {
		name, body string
		want       int
	}{
		{"empty", `{}`, 0},
		{"chat strings", `{"messages":[{"role":"system","content":"1234"},{"role":"user","content":"12345"}]}`, 1 + 2},
		{"chat parts", `{"messages":[{"role":"user","content":[{"type":"text","text":"12345678"},{"type":"image_url","image_url":{"url":"data:..."}}]}]}`, 2},
		{"chat null content", `{"messages":[{"role":"assistant","content":null,"tool_calls":[]}]}`, 0},
		{"anthropic system string", `{"system":"1234","messages":[{"role":"user","content":"1"}]}`, 2},
		{"anthropic system blocks", `{"system":[{"type":"text","text":"1234"},{"type":"text","text":"1"}],"messages":[]}`, 2},
		{"prompt string", `{"prompt":"123456789"}`, 3},
		{"prompt strings", `{"prompt":["1","22"]}`, 2},
		{"prompt token ids", `{"prompt":[1,2,3]}`, 3},
		{"prompt token arrays", `{"prompt":[[1,2],[3]]}`, 3},
		{"input string", `{"input":"12345"}`, 2},
		{"input strings", `{"input":["1","2"]}`, 2},
		{"input token arrays", `{"input":[[1,2,3],[4]]}`, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := promptTokens(gjson.Parse(tc.body), "m", defaultCountTokens); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestCountInputs(t *testing.T) {
	for body, want := range map[string]int{
		`"x"`: 1, `["a","b","c"]`: 3, `[1,2,3]`: 1, `[[1],[2]]`: 2, `[]`: 0, `null`: 0,
	} {
		if got := countInputs(gjson.Parse(body)); got != want {
			t.Errorf("%s: %d inputs, want %d", body, got, want)
		}
	}
}
