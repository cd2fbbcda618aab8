//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// The official OpenAI Node SDK (openai on npm, pinned in sdk/package.json,
// installed by .ci/run, unmodified) against a ringgate node process in
// front of the fake provider: models.list, responses.create as JSON and as
// a stream, and a tenant at its limit answered with the SDK's
// RateLimitError.
func TestOpenAINodeSDK(t *testing.T) {
	nodeBin := needSDK(t)
	dir := t.TempDir()
	ps := newProcs(t, dir)
	fakeAddr := launchFake(t, ps)
	var listen string
	_, err := ps.launch("node", binary, 15*time.Second, func() ([]string, func() bool, error) {
		port, err := freePort(false)
		if err != nil {
			return nil, nil, err
		}
		listen = addr(port)
		cfg := filepath.Join(dir, "node.toml")
		toml := fmt.Sprintf(`[node]
name = "sdk"
listen = %q
gossip = ""

[queue]
interactive_wait = "0s"

[[upstreams]]
name = "fake"
kind = "openai"
base_url = "http://%s"
api_key = "sk-upstream"
models = ["gpt-4o-mini", "gpt-4o"]

[[tenants]]
name = "app"
keys = ["sk-app"]
rpm = 1000
tpm = 10000000

# limited's own limit is wide; its team's refuses the second call.
[[teams]]
name = "small"
rpm = 1

[[tenants]]
name = "limited"
keys = ["sk-limited"]
rpm = 1000
team = "small"
`, listen, fakeAddr)
		if err := os.WriteFile(cfg, []byte(toml), 0o600); err != nil {
			return nil, nil, err
		}
		return []string{"-config", cfg}, answers("http://"+listen+"/readyz", http.StatusOK), nil
	})
	if err != nil {
		t.Fatal(err)
	}

	got := runSDK(t, nodeBin, "http://"+listen, "sk-app", "sk-limited")
	if !slices.Equal(got.Models, []string{"gpt-4o-mini", "gpt-4o"}) {
		t.Errorf("models.list: %v", got.Models)
	}
	if got.Limited.OK != 1 || got.Limited.RateLimited != 2 || len(got.Limited.Other) > 0 || got.Limited.RetryAfter == nil {
		t.Errorf("at its team's rpm 1: %+v, want 1 admitted and 2 RateLimitError with Retry-After", got.Limited)
	}
}

// The same SDK through HAProxy (TCP mode) in front of three clustered
// nodes: each call may land on any node, which hands it to the tenant's
// owner.
func TestOpenAINodeSDKBehindHAProxy(t *testing.T) {
	nodeBin := needSDK(t)
	haproxyBin := needTool(t, "haproxy", "/usr/sbin/haproxy")
	dir := t.TempDir()
	ps := newProcs(t, dir)
	fakeAddr := launchFake(t, ps)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	secret := base64.StdEncoding.EncodeToString(key)
	nodes := []*gwNode{{name: "node-1"}, {name: "node-2"}, {name: "node-3"}}
	for i, n := range nodes {
		var join []string
		if i > 0 {
			join = []string{nodes[0].gossip}
		}
		err := ps.launchNode(n, 15*time.Second, func() string { return nodeConfig(n, join, secret, fakeAddr, scenario{}) })
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := waitCluster(nodes, 3, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	front, _ := launchHAProxy(t, ps, haproxyBin, dir, nodes, func(st map[string]string) bool {
		return isUp(st["node-1"]) && isUp(st["node-2"]) && isUp(st["node-3"])
	})
	got := runSDK(t, nodeBin, "http://"+front, "sk-acme", "sk-crewmate")
	if !slices.Equal(got.Models, []string{"gpt-4o-mini"}) {
		t.Errorf("models.list: %v", got.Models)
	}
	// Whichever node each call reaches, the team's owner decides.
	if got.Limited.OK != 1 || got.Limited.RateLimited != 2 || len(got.Limited.Other) > 0 || got.Limited.RetryAfter == nil {
		t.Errorf("at its team's rpm 1, through HAProxy: %+v, want 1 admitted and 2 RateLimitError with Retry-After", got.Limited)
	}
}

// sdkResult is what the SDK script printed.
type sdkResult struct {
	Models []string `json:"models"`
	JSON   struct {
		Status       string `json:"status"`
		Text         bool   `json:"text"`
		InputTokens  int    `json:"input_tokens"`
		OutputTokens int    `json:"output_tokens"`
	} `json:"json"`
	Stream struct {
		Deltas    int `json:"deltas"`
		Completed *struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		} `json:"completed"`
	} `json:"stream"`
	Limited struct {
		OK          int      `json:"ok"`
		RateLimited int      `json:"rateLimited"`
		RetryAfter  *string  `json:"retryAfter"`
		Other       []string `json:"other"`
	} `json:"limited"`
}

// runSDK runs the SDK script against url with tenant key (and limitedKey,
// "" for none) and checks what every gateway must give it.
func runSDK(t *testing.T, nodeBin, url, key, limitedKey string) sdkResult {
	t.Helper()
	script, _ := filepath.Abs(filepath.Join("sdk", "openai_sdk.mjs"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, script)
	cmd.Dir = "sdk"
	cmd.Env = append(childEnv(), "RINGGATE_URL="+url, "RINGGATE_KEY="+key,
		"RINGGATE_LIMITED_KEY="+limitedKey, "RINGGATE_MODEL=gpt-4o-mini")
	raw, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, raw)
	}
	var got sdkResult
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("the SDK script printed %s: %v", raw, err)
	}
	t.Logf("the SDK saw: %s", raw)
	if got.JSON.Status != "completed" || !got.JSON.Text || got.JSON.InputTokens <= 0 || got.JSON.OutputTokens <= 0 {
		t.Errorf("responses.create: %+v", got.JSON)
	}
	if got.Stream.Deltas == 0 || got.Stream.Completed == nil || got.Stream.Completed.OutputTokens != got.Stream.Deltas {
		t.Errorf("responses.create stream: %d deltas, completed %+v", got.Stream.Deltas, got.Stream.Completed)
	}
	return got
}

// needSDK finds node and the installed SDK (.ci/run installs both).
func needSDK(t *testing.T) string {
	t.Helper()
	nodeBin := needTool(t, "node")
	if _, err := os.Stat(filepath.Join("sdk", "node_modules", "openai", "package.json")); err != nil {
		msg := "the OpenAI SDK is not installed: npm ci --prefix e2e/sdk (.ci/run does)"
		if os.Getenv("RINGGATE_E2E_SKIP_MISSING") == "1" {
			t.Skip(msg)
		}
		t.Fatal(msg)
	}
	return nodeBin
}

// launchFake starts the fake provider and returns its address.
func launchFake(t *testing.T, ps *procs) string {
	t.Helper()
	var fakeAddr string
	_, err := ps.launch("fake-upstream", binary, 10*time.Second, func() ([]string, func() bool, error) {
		port, err := freePort(false)
		fakeAddr = addr(port)
		return []string{"fake-upstream", "-listen", fakeAddr, "-max-records", "0"}, answers("http://"+fakeAddr+"/_records", http.StatusOK), err
	})
	if err != nil {
		t.Fatal(err)
	}
	return fakeAddr
}
