package models

import (
	"encoding/json"
	"testing"

	"github.com/ringgate/ringgate/config"
)

func answer(t *testing.T, ups []config.Upstream, path string, anthropic bool) (string, string) {
	t.Helper()
	v, missing := Answer(ups, path, anthropic)
	if v == nil {
		return "", missing
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), missing
}

// Each routed model is listed once, in config order, by the first upstream
// that routes it, in either shape; one model or an unknown one by its id;
// no model at all is an empty list, not null.
func TestAnswer(t *testing.T) {
	ups := []config.Upstream{{Name: "oa", Models: []string{"a", "b"}}, {Name: "an", Models: []string{"b", "c"}}}
	cases := []struct {
		path      string
		anthropic bool
		want      string
	}{
		{Path, false, `{"data":[{"id":"a","object":"model","created":0,"owned_by":"oa"},{"id":"b","object":"model","created":0,"owned_by":"oa"},{"id":"c","object":"model","created":0,"owned_by":"an"}],"object":"list"}`},
		{Path, true, `{"data":[{"type":"model","id":"a","display_name":"a","created_at":"1970-01-01T00:00:00Z"},{"type":"model","id":"b","display_name":"b","created_at":"1970-01-01T00:00:00Z"},{"type":"model","id":"c","display_name":"c","created_at":"1970-01-01T00:00:00Z"}],"first_id":"a","has_more":false,"last_id":"c"}`},
		{Path + "/c", false, `{"id":"c","object":"model","created":0,"owned_by":"an"}`},
	}
	for _, tc := range cases {
		if got, missing := answer(t, ups, tc.path, tc.anthropic); got != tc.want || missing != "" {
			t.Errorf("%s (anthropic %v): %s %q\nwant %s", tc.path, tc.anthropic, got, missing, tc.want)
		}
	}
	if got, missing := answer(t, ups, Path+"/nope", false); got != "" || missing != "nope" {
		t.Errorf("unknown model: %s, missing %q", got, missing)
	}
	if got, _ := answer(t, nil, Path, true); got != `{"data":[],"first_id":null,"has_more":false,"last_id":null}` {
		t.Errorf("no model: %s", got)
	}
	if !IsPath(Path) || !IsPath(Path+"/x") || IsPath(Path+"x") || IsPath("/v1/chat/completions") {
		t.Error("IsPath")
	}
}
