package router_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/reserve"
)

// Ordinary requests whose non-text bytes land in Uncounted and push the
// prompt's reservation past a modest tpm (10 000): refused 429 "too large"
// for good, though the provider would bill well under the limit.
func TestOrdinaryRequestsNotTooLarge(t *testing.T) {
	const tpm = 10000
	code := strings.Repeat("    result = compute(alpha, beta)  # step\n", 520) // ~22 KB of code
	q := func(s string) string { return fmt.Sprintf("%q", s) }

	// 7 000 token ids as Python's json.dumps (requests' json=, httpx<0.28)
	// writes them: ", " between elements.
	ids := make([]string, 7000)
	for i := range ids {
		ids[i] = strconv.Itoa(1000 + i%50000)
	}
	tokPrompt := "[" + strings.Join(ids, ", ") + "]"

	tk, _ := reserve.NewTokenizer()
	t.Logf("the code is %d tokens (o200k)", tk.Count(openAIModel, code))
	img := base64.StdEncoding.EncodeToString(make([]byte, 300<<10)) // a 300 KB PNG's size
	cases := []struct {
		name, path, body, billed string
	}{
		{
			name: "completions prompt of 7000 token ids, python separators", path: "/v1/completions",
			body:   `{"model": "` + openAIModel + `", "max_tokens": 16, "prompt": ` + tokPrompt + `}`,
			billed: "7 000 prompt tokens",
		},
		{
			name: "predicted outputs: the file in the message and in prediction", path: "/v1/chat/completions",
			body:   `{"model":"` + openAIModel + `","max_tokens":2000,"messages":[{"role":"user","content":"Rename alpha to a:"},{"role":"user","content":` + q(code) + `}],"prediction":{"type":"content","content":` + q(code) + `}}`,
			billed: "the file once + 2 000 max; prediction is billed as output only when rejected",
		},
		{
			name: "responses stored prompt with an input_image variable", path: "/v1/responses",
			body:   `{"model":"` + openAIModel + `","max_output_tokens":200,"prompt":{"id":"pmpt_abc","variables":{"photo":{"type":"input_image","image_url":"data:image/png;base64,` + img + `"}}},"input":"describe the photo"}`,
			billed: "one image (~1 000 tokens)",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envConfig{tenants: []config.Tenant{tenantCfg("fp", 1000, tpm, 10)}})
			r := e.post(tc.path, keyOf("fp"), []byte(tc.body), nil)
			t.Logf("%d-byte body, provider bills %s; answered %d %.160s", len(tc.body), tc.billed, r.status, r.body)
			if r.status == http.StatusTooManyRequests {
				t.Errorf("refused as too large for a tpm of %d", tpm)
			}
		})
	}
}
