package upstream

import (
	"encoding/base64"
	"strings"
	"testing"
)

// Uncounted of ordinary bodies: what held (printed), and the cases that do
// not (failing).
func TestUncountedOrdinaryBodies(t *testing.T) {
	img := base64.StdEncoding.EncodeToString(make([]byte, 200<<10))
	cjk := strings.Repeat(`\u6f22\u5b57\u306e\u6587\u7ae0`, 2000) // ensure_ascii CJK
	cases := []struct {
		name string
		ep   Endpoint
		body string
		max  int // most Uncounted past the allowance expected
	}{
		{"chat image_url data uri", Chat, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is it"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + img + `","detail":"high"}}]}]}`, 0},
		{"chat input_audio", Chat, `{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"` + img + `","format":"wav"}}]}]}`, 0},
		{"chat file_data", Chat, `{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,` + img + `"}}]}]}`, 0},
		{"responses function_call_output image", Responses, `{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_image","image_url":"data:image/png;base64,` + img + `"}]}]}`, 0},
		{"anthropic tool_result image", Messages, `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + img + `"}}]}]}]}`, 0},
		{"ensure_ascii CJK text", Chat, `{"model":"m","messages":[{"role":"user","content":"` + cjk + `"}]}`, 0},
	}
	for _, tc := range cases {
		r, err := ParseRequest(tc.ep, []byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		over := r.Uncounted - 512 - 64*r.Messages
		text := 0
		for _, s := range r.Texts {
			text += len(s)
		}
		t.Logf("%-42s body %7d  media %d  text bytes %7d  uncounted %5d  over %d", tc.name, len(tc.body), r.Media, text, r.Uncounted, max(over, 0))
		if over > tc.max || text > len(tc.body)/2 && r.Media == 0 && strings.Contains(tc.body, "base64") {
			t.Errorf("%s: base64 media reserved as text or uncounted", tc.name)
		}
	}
}
