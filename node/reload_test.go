package node

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringgate/ringgate/config"
	"github.com/ringgate/ringgate/internal/audit"
	"github.com/ringgate/ringgate/router"
)

// A rolling reload from the config file, under load at three times the
// tenant's limit, through POST /admin/reload on one node then the other:
//
//   - /cluster says the members run different config versions until both
//     have reloaded, and shows each reload's outcome;
//   - the new limit is in force within a second, and what the tenant used
//     before the reload still counts (no window at the provider holds more
//     than the new limit, none before it more than the old one);
//   - a broken file is refused with the key and line, the old config runs
//     on (the next window is as full as before), and /cluster says so.
func TestClusterReloadFromFile(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const oldRPM, newRPM = 20, 40
	dir := t.TempDir()
	file := filepath.Join(dir, "tenants.toml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tenantFile := func(rpm any) string {
		return fmt.Sprintf("[[tenants]]\nname = \"alpha\"\nkeys = [%q]\nrpm = %v\ntpm = 1073741824\nconcurrency = 1048576\npriority = \"interactive\"\n", "sk-alpha", rpm)
	}
	write(tenantFile(oldRPM))
	// The source: the tenants from the file, the rest as the node started
	// (what its flags and the rest of its file say).
	source := func(started *config.Config) (*config.Config, error) {
		f, err := config.Load(file)
		if err != nil {
			return nil, err
		}
		next := *started
		next.Tenants = f.Tenants
		return &next, next.Validate()
	}
	c := startClusterWith(t, 2, hoWindow, clOptions{Source: source}, clTenant("alpha", oldRPM))
	c.warm([]string{"alpha"})
	n1, n2 := c.live()[0], c.live()[1]

	load := c.startLoad([]string{"alpha"}, c.live(), hoWindow/(3*oldRPM))
	time.Sleep(hoWindow + hoWindow/4) // pacing: a full window at the old limit

	write(tenantFile(newRPM))
	reloadAt := time.Now()
	first := c.reloadVia(n1)
	if first.status != http.StatusOK {
		t.Fatalf("POST /admin/reload on %s: %d %s", n1.Name(), first.status, first.body)
	}
	if !pollUntil(3*time.Second, func() bool { return c.clusterOf(n2).ConfigsDiffer }) {
		t.Errorf("%s's /cluster never said the members' configs differ with one reloaded", n2.Name())
	}
	if second := c.reloadVia(n2); second.status != http.StatusOK {
		t.Fatalf("POST /admin/reload on %s: %d %s", n2.Name(), second.status, second.body)
	}
	if !pollUntil(3*time.Second, func() bool { return !c.clusterOf(n1).ConfigsDiffer && !c.clusterOf(n2).ConfigsDiffer }) {
		t.Errorf("/cluster still says the configs differ once both reloaded: %+v", c.clusterOf(n1))
	}
	newVersion := c.clusterOf(n1).ConfigVersion
	time.Sleep(time.Second + hoWindow + hoWindow/4) // pacing: a full window at the new limit, a second after the reload

	write(tenantFile(`"forty"`))
	brokenAt := time.Now()
	for _, nd := range c.live() {
		r := c.reloadVia(nd)
		if r.status != http.StatusBadRequest || !strings.Contains(r.body, "invalid_config") ||
			!strings.Contains(r.body, "tenants.toml:4: tenants[0].rpm: must be an integer") {
			t.Errorf("a broken file reloaded on %s: %d %s, want 400 invalid_config naming the line and key", nd.Name(), r.status, r.body)
		}
		cv := c.clusterOf(nd)
		if lr := cv.LastReload; lr == nil || lr.OK || lr.Trigger != "admin" || !strings.Contains(lr.Error, "tenants[0].rpm") || cv.ConfigVersion != newVersion {
			t.Errorf("%s's /cluster after the broken file: version %s, last reload %+v; want %s running and the refusal", nd.Name(), cv.ConfigVersion, lr, newVersion)
		}
	}
	time.Sleep(hoWindow + hoWindow/4) // pacing: a full window after the refusal
	end := time.Now()
	res := load.finish()
	for _, r := range res {
		if r.err != nil || (r.rep.status != http.StatusOK && r.rep.status != http.StatusTooManyRequests) {
			t.Errorf("%s via %s: %v %v", r.tenant, r.via, r.rep, r.err)
		}
	}

	got := clReceived(c.records("alpha"))
	span := hoWindow - clJitter
	var beforeReload []time.Time
	for _, at := range got {
		if at.Before(reloadAt) {
			beforeReload = append(beforeReload, at)
		}
	}
	before := audit.MaxIn(beforeReload, span)
	after := audit.MaxIn(got, span)
	inForce := clCountIn(got, reloadAt.Add(time.Second), reloadAt.Add(time.Second+hoWindow))
	afterBroken := clCountIn(got, brokenAt.Add(hoWindow/8), brokenAt.Add(hoWindow/8+hoWindow))
	t.Logf("fullest window before the reload %d/%d, over the run %d/%d; a window from a second after the reload %d, one after the broken file %d; run until %v",
		before.Count, oldRPM, after.Count, newRPM, inForce, afterBroken, end.Sub(reloadAt).Round(time.Millisecond))
	if before.Count > oldRPM {
		t.Errorf("before the reload: %d in a window, limit %d", before.Count, oldRPM)
	}
	if after.Count > newRPM {
		t.Errorf("%d in a window, limit %d after the reload: what was used before it did not count", after.Count, newRPM)
	}
	if inForce < newRPM*85/100 {
		t.Errorf("a window from a second after the reload admitted %d, want about %d: the new limit was not in force", inForce, newRPM)
	}
	if afterBroken < newRPM*85/100 {
		t.Errorf("a window after the broken file admitted %d, want about %d: the running config did not go on", afterBroken, newRPM)
	}
}

type reloadReply struct {
	status int
	body   string
}

// reloadVia posts /admin/reload to nd.
func (c *clCluster) reloadVia(nd *clNode) reloadReply {
	c.t.Helper()
	resp, err := c.hc.Post("http://"+nd.Addr()+"/admin/reload", "application/json", nil)
	if err != nil {
		c.t.Fatalf("reload %s: %v", nd.Name(), err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reloadReply{status: resp.StatusCode, body: string(b)}
}

// clusterView is GET /cluster as a test reads it.
type clusterView struct {
	ConfigVersion string               `json:"config_version"`
	ConfigsDiffer bool                 `json:"configs_differ"`
	LastReload    *router.ReloadResult `json:"last_reload"`
	Members       []router.Member      `json:"members"`
}

// clusterOf reads nd's /cluster.
func (c *clCluster) clusterOf(nd *clNode) clusterView {
	c.t.Helper()
	resp, err := c.hc.Get("http://" + nd.Addr() + "/cluster")
	if err != nil {
		c.t.Fatalf("cluster of %s: %v", nd.Name(), err)
	}
	defer resp.Body.Close()
	var cv clusterView
	if err := json.NewDecoder(resp.Body).Decode(&cv); err != nil {
		c.t.Fatalf("cluster of %s: %v", nd.Name(), err)
	}
	return cv
}
