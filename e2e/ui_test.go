//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/ringgate/ringgate/internal/redistest"
)

// uiTenants are the status page test's tenants: enough that a third node
// owns some. "tight" allows two requests a minute: the test's third is
// refused. The load spares it and spills over "small".
var uiTenants = []string{"acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "wonka",
	"tyrell", "cyberdyne", "soylent", "small", "tight"}

// TestUIInABrowser starts two ringgate nodes and a fake provider, opens
// the status page of the first in headless Chromium, and checks, without
// a reload: no console errors, every member shown, a tenant's refusal
// shown, and a third node that joins shown with the tenants it now owns.
// With RINGGATE_UI_SCREENSHOT=path it saves the page, under the test's
// load, to path (make ui-screenshot: docs/ui.png).
func TestUIInABrowser(t *testing.T) {
	browser := needChromium(t)
	needTool(t, "redis-server", "/usr/bin/redis-server", "/usr/local/bin/redis-server")
	redis := redistest.Start(t) // the provider's leases
	dir := t.TempDir()
	ps := newProcs(t, dir)
	fake := launchFake(t, ps)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	secret := base64.StdEncoding.EncodeToString(key)
	nodes := []*gwNode{{name: "node-1"}, {name: "node-2"}, {name: "node-3"}}
	start := func(n *gwNode, join []string) {
		if err := ps.launchNode(n, 20*time.Second, func() string { return uiNodeConfig(n, join, secret, redis.Addr(), fake) }); err != nil {
			t.Fatal(err)
		}
	}
	start(nodes[0], nil)
	start(nodes[1], []string{nodes[0].gossip})
	if err := waitCluster(nodes[:2], 2, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	stopLoad := uiLoad(nodes[:2])
	defer stopLoad()

	ctx, errs := openBrowser(t, browser)
	page := "http://" + nodes[0].listen + "/ui"
	_, err := chromedp.Run(ctx, chromedp.Navigate(page))
	must(t, "open "+page, err)
	waitFor(t, ctx, "both members shown", `document.querySelectorAll('#members .member').length === 2 &&
		!!document.querySelector('#members [data-name="node-1"]') && !!document.querySelector('#members [data-name="node-2"]')`)
	waitFor(t, ctx, "every tenant listed, tight under its limit", fmt.Sprintf(`document.querySelectorAll('#tenants tbody tr').length === %d &&
		!document.querySelector('tr[data-tenant="tight"]')?.classList.contains('at-limit')`, len(uiTenants)))

	refuseTight(t, nodes[1])
	waitFor(t, ctx, "tight shown at its limit", `document.querySelector('tr[data-tenant="tight"]')?.classList.contains('at-limit')`)

	start(nodes[2], []string{nodes[0].gossip})
	if err := waitCluster(nodes, 3, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "node-3 shown, owning tenants", `!!document.querySelector('#members [data-name="node-3"]') &&
		[...document.querySelectorAll('#tenants td.owner')].some(e => e.textContent === 'node-3')`)
	checkOwnersShown(t, ctx, nodes[0])
	if path := os.Getenv("RINGGATE_UI_SCREENSHOT"); path != "" {
		waitFor(t, ctx, "small refused under the load", `document.querySelector('tr[data-tenant="small"]')?.classList.contains('at-limit')`)
		screenshot(t, ctx, path)
	}
	if e := errs(); len(e) > 0 {
		t.Fatalf("the page logged errors: %s", strings.Join(e, "; "))
	}
}

// refuseTight sends tight's requests through n until its own limit
// refuses one (a provider's refusal, while a lease is on its way, does not
// count), at most 10.
func refuseTight(t *testing.T, n *gwNode) {
	t.Helper()
	var answers []string
	for range 10 {
		resp, body, err := postChat(adminClient, "http://"+n.listen+"/v1/chat/completions", "tight", chatBody)
		if err == nil && resp.StatusCode == http.StatusTooManyRequests && strings.Contains(string(body), "limit 2 per") {
			return
		}
		answers = append(answers, fmt.Sprintf("%v %.200s", err, body))
	}
	t.Fatalf("tight's own limit refused none of 10 requests: %s", strings.Join(answers, "; "))
}

const chatBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":8}`

// needChromium finds Debian's chromium; a missing one fails the test (make
// deps installs it) unless RINGGATE_E2E_SKIP_MISSING=1.
func needChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "chromium not found: run `make deps` (Debian: apt-get install chromium), or set RINGGATE_E2E_SKIP_MISSING=1 to skip this test"
	if os.Getenv("RINGGATE_E2E_SKIP_MISSING") == "1" {
		t.Skip(msg)
	}
	t.Fatal(msg)
	return ""
}

// openBrowser starts headless Chromium at path for the test; errs lists
// the page's uncaught exceptions and console errors so far.
func openBrowser(t *testing.T, path string) (ctx context.Context, errs func() []string) {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 800))
	var mu sync.Mutex
	var seen []string
	listen := func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			if d.Exception != nil {
				seen = append(seen, "exception: "+d.Exception.Description)
			} else {
				seen = append(seen, "exception: "+d.Text)
			}
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var args []string
				for _, a := range ev.Args {
					args = append(args, cmp.Or(a.Description, string(a.Value)))
				}
				seen = append(seen, "console.error: "+strings.Join(args, " "))
			}
		case *cdplog.EventEntryAdded:
			// What the page's script cannot see: a file that failed to
			// load, a rule of the page's Content-Security-Policy broken.
			if ev.Entry.Level == cdplog.EntryLevelError {
				seen = append(seen, "browser: "+ev.Entry.Text+" "+ev.Entry.URL)
			}
		}
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(listen))
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// waitFor waits, up to 15 s, until the page's expression is true.
func waitFor(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(15*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	if err != nil {
		status, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('status').textContent`))
		members, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('members').textContent`))
		tenants, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#tenants tbody').innerText`))
		t.Fatalf("%s: not seen on the page (%v); its status %q, members %q, tenants:\n%s", what, err, status, members, tenants)
	}
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// checkOwnersShown checks that the page shows each tenant's owner as the
// node serving it says in /tenants/{name}.
func checkOwnersShown(t *testing.T, ctx context.Context, n *gwNode) {
	t.Helper()
	shown, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](
		`Object.fromEntries([...document.querySelectorAll('#tenants tbody tr')].map(r => [r.dataset.tenant, r.querySelector('td.owner').textContent]))`))
	must(t, "read the owners shown", err)
	for name, owner := range shown {
		code, body, err := get("http://" + n.listen + "/tenants/" + name)
		var tv struct{ Owner string }
		if err != nil || code != http.StatusOK || json.Unmarshal(body, &tv) != nil {
			t.Fatalf("/tenants/%s: %d %v %s", name, code, err, body)
		}
		if tv.Owner != owner {
			t.Fatalf("the page shows %s owning %s, /tenants/%s says %s", owner, name, name, tv.Owner)
		}
	}
}

// uiLoad sends requests for every tenant but tight, round the nodes, a
// few a second each, until stopped: the status page has windows to show,
// and small is refused.
func uiLoad(nodes []*gwNode) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	c := &http.Client{Timeout: 5 * time.Second}
	for i, name := range uiTenants {
		if name == "tight" {
			continue
		}
		wg.Go(func() {
			tick := time.NewTicker(time.Duration(300+40*i) * time.Millisecond)
			defer tick.Stop()
			for k := 0; ; k++ {
				select {
				case <-done:
					return
				case <-tick.C:
				}
				resp, _, err := postChat(c, "http://"+nodes[k%len(nodes)].listen+"/v1/chat/completions", name, chatBody)
				if err == nil {
					resp.Body.Close()
				}
			}
		})
	}
	return func() { close(done); wg.Wait() }
}

// screenshot saves the page, as a PNG, to path (relative to the module
// root).
func screenshot(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	must(t, "screenshot", err)
	if !filepath.IsAbs(path) {
		path = filepath.Join("..", path)
	}
	must(t, "write "+path, os.WriteFile(path, png, 0o644))
	t.Logf("wrote %s (%d bytes)", path, len(png))
}

// uiNodeConfig is the config of node n of the status page test.
func uiNodeConfig(n *gwNode, join []string, secret, redis, fake string) string {
	quoted := make([]string, len(join))
	for i, j := range join {
		quoted[i] = fmt.Sprintf("%q", j)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `[node]
name = %q
listen = %q
gossip = %q
join = [%s]

[cluster]
secret = %q

[redis]
addr = %q

[queue]
interactive_wait = "0s"
batch_wait = "0s"

[[upstreams]]
name = "fake"
kind = "openai"
base_url = "http://%s"
api_key = "sk-upstream"
models = ["gpt-4o-mini"]
rpm = 6000
`, n.name, n.listen, n.gossip, strings.Join(quoted, ", "), secret, redis, fake)
	for _, name := range uiTenants {
		rpm := 600
		switch name {
		case "tight":
			rpm = 2
		case "small":
			rpm = 12
		}
		fmt.Fprintf(&b, "\n[[tenants]]\nname = %q\nkeys = [%q]\nrpm = %d\ntpm = 200000\nconcurrency = 20\n", name, "sk-"+name, rpm)
	}
	return b.String()
}

// TestUITokenInABrowser opens the status page of a node with an admin
// token: without it the page asks for it and shows no data; with it in
// the #token= fragment the page shows the node, and drops the fragment
// from the address bar.
func TestUITokenInABrowser(t *testing.T) {
	browser := needChromium(t)
	ps := newProcs(t, t.TempDir())
	fake := launchFake(t, ps)
	n := &gwNode{name: "solo"}
	err := ps.launchNode(n, 20*time.Second, func() string {
		return fmt.Sprintf(`[node]
name = "solo"
listen = %q

[admin]
token = "tok-ui"

[[upstreams]]
name = "fake"
kind = "openai"
base_url = "http://%s"
api_key = "sk-upstream"
models = ["gpt-4o-mini"]

[[tenants]]
name = "acme"
keys = ["sk-acme"]
rpm = 60
`, n.listen, fake)
	})
	must(t, "start solo", err)
	ctx, errs := openBrowser(t, browser)
	_, err = chromedp.Run(ctx, chromedp.Navigate("http://"+n.listen+"/ui"))
	must(t, "open /ui", err)
	waitFor(t, ctx, "the token asked for, no data shown", `!document.getElementById('auth').hidden &&
		document.querySelectorAll('#members .member').length === 0`)
	_, err = chromedp.Run(ctx, chromedp.Navigate("http://"+n.listen+"/ui#token=tok-ui"))
	must(t, "open /ui#token=", err)
	waitFor(t, ctx, "the node shown, the fragment gone", `!!document.querySelector('#members [data-name="solo"]') &&
		!!document.querySelector('tr[data-tenant="acme"]') && location.hash === ''`)
	for _, e := range errs() {
		// The first poll's 401 is how the page learns it needs the token.
		if !strings.Contains(e, "401") {
			t.Fatalf("the page logged an error: %s", e)
		}
	}
}
