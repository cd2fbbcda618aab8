package node

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/internal/benchsetup"
)

// A node's refused and access lines name the node, as all its lines do,
// once each (slog's level stays the line's level), and a reload from the
// config source turns the access lines on without asking for a restart.
func TestRefusedAndAccessLinesOfANode(t *testing.T) {
	_, up := benchsetup.Fake(t)
	cfg := benchsetup.Config("n1", up)
	cfg.Tenants[0].RPM = 1
	cfg.Queue.InteractiveWait, cfg.Queue.BatchWait = 0, 0
	next := *cfg
	next.Node.AccessLog = true
	logs := &clLog{}
	n, err := Start(cfg, Options{Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		Source: func() (*config.Config, error) { return &next, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	post := func(id string) int {
		req, err := http.NewRequest(http.MethodPost, "http://"+n.Addr()+"/v1/chat/completions", strings.NewReader(benchsetup.Body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+benchsetup.Key)
		req.Header.Set("X-Request-Id", id)
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s1, s2 := post("n-1"), post("n-2"); s1 != http.StatusOK || s2 != http.StatusTooManyRequests {
		t.Fatalf("statuses %d, %d: want 200, then 429", s1, s2)
	}
	refused := linesOf(logs.entries(), "refused")
	if len(refused) != 1 || refused[0]["node"] != "n1" || refused[0]["level"] != "INFO" || refused[0]["request_id"] != "n-2" {
		t.Fatalf("refused lines %v, want one of node n1 at INFO for n-2", refused)
	}
	if acc := linesOf(logs.entries(), "access"); len(acc) != 0 {
		t.Fatalf("access lines %v with access_log off", acc)
	}
	if res := n.ReloadFromSource("test"); !res.OK || len(res.RestartRequired) != 0 {
		t.Fatalf("reload: %+v, want applied with no restart required", res)
	}
	if s := post("n-3"); s != http.StatusTooManyRequests {
		t.Fatalf("status %d after the reload, want 429", s)
	}
	acc := linesOf(logs.entries(), "access")
	if len(acc) != 1 || acc[0]["node"] != "n1" || acc[0]["request_id"] != "n-3" || acc[0]["status"] != 429.0 {
		t.Errorf("access lines %v, want one of node n1 for n-3", acc)
	}
}

func linesOf(entries []map[string]any, msg string) []map[string]any {
	var out []map[string]any
	for _, e := range entries {
		if e["msg"] == msg {
			out = append(out, e)
		}
	}
	return out
}
