package router_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/ringgate/ringgate/config"
)

// Hidden prompt text that the commit's Uncounted check does not see.
//
//  1. A document's source with its keys given twice: the gateway's get()
//     reads the first "type" (base64: a media part, whose bytes are all
//     excluded from Uncounted), a last-wins provider the last (text: the
//     whole data is prompt text).
//  2. Counted text inside a media part (a document's context) is
//     subtracted from the body twice (counted, and again in the part's
//     media bytes): context written as escaped spaces ("\u0020", 6 bytes,
//     128 spaces a token) cancels as many bytes of hidden text elsewhere.
func TestHiddenTextInMediaPartReserved(t *testing.T) {
	const tpm = 20000
	big := bigText(100000) // ~100 000 tokens, ~540 KB
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	m := anthropicModel
	escSpaces := `"` + strings.Repeat(`\u0020`, len(big)/6+1000) + `"`
	cases := []struct{ name, control, evasion string }{
		{
			name:    "document source type base64 then type text",
			control: `{"model":"` + m + `","max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":` + q(big) + `}},{"type":"text","text":"summarize"}]}]}`,
			evasion: `{"model":"` + m + `","max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0xLjQK","type":"text","media_type":"text/plain","data":` + q(big) + `}},{"type":"text","text":"summarize"}]}]}`,
		},
		{
			name:    "media part's counted context offsets a duplicate data key",
			control: `{"model":"` + m + `","max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"x","data":` + q(big) + `}},{"type":"text","text":"summarize"}]}]}`,
			evasion: `{"model":"` + m + `","max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"url","url":"https://example.com/a.pdf"},"context":` + escSpaces + `},{"type":"document","source":{"type":"text","media_type":"text/plain","data":"x","data":` + q(big) + `}},{"type":"text","text":"summarize"}]}]}`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envConfig{tenants: []config.Tenant{tenantCfg("hid", 1000, tpm, 10)}})
			ctl := e.post("/v1/messages", keyOf("hid"), []byte(tc.control), nil)
			if ctl.status != http.StatusTooManyRequests {
				t.Fatalf("control answered %s, want 429", ctl)
			}
			before, _ := e.tenant("hid")
			ev := e.post("/v1/messages", keyOf("hid"), []byte(tc.evasion), nil)
			v := e.waitTenant("hid", "in_flight 0", func(v tenantView) bool { return v.InFlight.Used == 0 })
			t.Logf("control 429; evasion (%d bytes, ~100 000 tokens a last-wins provider bills as text) answered %d; tenant used %d -> %d (tpm %d)",
				len(tc.evasion), ev.status, before.Tokens.Used, v.Tokens.Used, tpm)
			if ev.status != http.StatusTooManyRequests {
				t.Errorf("~100 000 hidden prompt tokens admitted for a tpm of %d", tpm)
			}
		})
	}
}
