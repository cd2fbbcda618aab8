package deploy

import (
	"bytes"
	"debug/elf"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/ringgate/ringgate/config"
)

// The Dockerfile builds with `make static`; those flags give a binary with
// no interpreter and no shared library (it runs FROM scratch), whose
// healthcheck subcommand (the image's HEALTHCHECK) tells a live node from a
// dead one. The image runs as a numbered non-root user.
func TestStaticBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	df, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`(?m)^FROM golang:\S+ AS build$`,
		`(?m)^RUN make static OUT=/out/ringgate$`,
		`(?m)^FROM scratch$`,
		`(?m)^USER [1-9][0-9]*:[1-9][0-9]*$`,
		`(?m)^HEALTHCHECK .*CMD \["/ringgate", "healthcheck"\]$`,
		`(?m)^ENTRYPOINT \["/ringgate", "-config", "/etc/ringgate/config.toml"\]$`,
	} {
		if !regexp.MustCompile(want).Match(df) {
			t.Errorf("the Dockerfile has no line matching %s", want)
		}
	}

	bin := filepath.Join(t.TempDir(), "ringgate")
	cmd := exec.Command("make", "-s", "static", "OUT="+bin)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make static: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the static build has a %v program header: it is dynamically linked", p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the static build needs %v", libs)
	}

	// The healthcheck: a node that serves, then none.
	port := freePort(t)
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	cfgFile := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgFile, []byte("[node]\nname = \"hc\"\nlisten = \""+listen+"\"\ngossip = \"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	node := exec.Command(bin, "-config", cfgFile)
	var logs bytes.Buffer
	node.Stdout, node.Stderr = &logs, &logs
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = node.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = node.Process.Kill()
		<-exited
	})
	healthcheck := func() error {
		c := exec.Command(bin, "healthcheck")
		c.Env = append(os.Environ(), "RINGGATE_LISTEN="+listen)
		out, err := c.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for healthcheck() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("healthcheck never passed against a running node; its log:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = node.Process.Signal(os.Interrupt) // drains and exits
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the node did not exit on SIGINT")
	}
	if err := healthcheck(); err == nil {
		t.Error("healthcheck passed with no node running")
	}

	if exec.Command("docker", "info").Run() == nil {
		out, err := exec.Command("docker", "build", "-q", "..").CombinedOutput()
		if err != nil {
			t.Errorf("docker build: %v\n%s", err, out)
		}
	} else {
		t.Log("no Docker daemon here: the image itself is not built (its build flags are, above)")
	}
}

// The Kubernetes manifests decode strictly into the API's types (an
// unknown or misspelt field fails), and hang together: the StatefulSet's
// pods are the headless Service's, found by DNS ready or not (a node joins
// before it is ready), probed on /readyz and /healthz, given more than
// the drain timeout to stop, non-root; the config they mount parses, with
// the environment the pods set; the disruption budget covers the pods.
func TestKubernetesManifests(t *testing.T) {
	raw, err := os.ReadFile("k8s/ringgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeManifests(raw)
	if err != nil {
		t.Fatal(err)
	}
	services, sts, pdb := m.services, m.sts, m.pdb
	pod := sts.Spec.Template
	labels := pod.Labels
	matches := func(sel map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	headless, ok := services[sts.Spec.ServiceName]
	switch {
	case !ok:
		t.Errorf("the StatefulSet's serviceName %q is not a Service here", sts.Spec.ServiceName)
	case headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses || !matches(headless.Spec.Selector):
		t.Errorf("the peers' Service %q must be headless, publish pods not ready yet, and select the pods", headless.Name)
	}
	if !matches(sts.Spec.Selector.MatchLabels) || pdb.Spec.Selector == nil || !matches(pdb.Spec.Selector.MatchLabels) {
		t.Error("the StatefulSet's and the disruption budget's selectors must select the pods")
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Error("the disruption budget should let one node away at a time")
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want ringgate alone", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Error("the readiness probe must be GET /readyz (503 while joining and draining)")
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Error("the liveness probe must be GET /healthz")
	}
	if sc := pod.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("the pods must run as non-root")
	}

	cfg, err := podConfig(t, m)
	if err != nil {
		t.Fatalf("the ConfigMap's config with the pods' environment: %v", err)
	}
	if cfg.Node.Name != "ringgate-0" || cfg.Node.Advertise != "10.0.0.7:7946" || len(cfg.Node.Join) != 1 ||
		!strings.HasPrefix(cfg.Node.Join[0], headless.Name+":") || len(cfg.Cluster.Secret) != 32 {
		t.Errorf("a pod's node: name %q, advertise %q, join %v, secret %d bytes; want the pod's, joining %s", cfg.Node.Name,
			cfg.Node.Advertise, cfg.Node.Join, len(cfg.Cluster.Secret), headless.Name)
	}
	if grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second; grace <= cfg.Node.DrainTimeout {
		t.Errorf("terminationGracePeriodSeconds %v is not more than node.drain_timeout %v: a drain would be killed", grace, cfg.Node.DrainTimeout)
	}
	if c.Args[0] != "-config" || c.VolumeMounts[0].MountPath != filepath.Dir(c.Args[1]) {
		t.Errorf("the container reads %v, the ConfigMap is mounted at %s", c.Args, c.VolumeMounts[0].MountPath)
	}
}

// The HAProxy recipe is a valid HAProxy config, in TCP mode, checking
// each node's /readyz.
func TestHAProxyRecipe(t *testing.T) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		bin = "/usr/sbin/haproxy"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skip("haproxy is not installed (Debian: apt-get install haproxy)")
	}
	if out, err := exec.Command(bin, "-c", "-f", "haproxy/haproxy.cfg").CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	recipe, _ := os.ReadFile("haproxy/haproxy.cfg")
	for _, want := range []string{"mode tcp", "option httpchk GET /readyz", "http-check expect status 200"} {
		if !bytes.Contains(recipe, []byte(want)) {
			t.Errorf("the recipe lacks %q", want)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// manifests are the documents of k8s/ringgate.yaml, decoded strictly into
// Kubernetes' API types.
type manifests struct {
	cm       corev1.ConfigMap
	services map[string]corev1.Service
	sts      appsv1.StatefulSet
	pdb      policyv1.PodDisruptionBudget
}

// decodeManifests decodes raw, every document strictly (an unknown or
// misspelt field fails).
func decodeManifests(raw []byte) (*manifests, error) {
	m := &manifests{services: map[string]corev1.Service{}}
	var errs []string
	for i, doc := range strings.Split(string(raw), "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil || meta.Kind == "" {
			continue // the comment before the first document
		}
		var err error
		switch meta.Kind {
		case "ConfigMap":
			err = yaml.UnmarshalStrict([]byte(doc), &m.cm)
		case "Service":
			var s corev1.Service
			err = yaml.UnmarshalStrict([]byte(doc), &s)
			m.services[s.Name] = s
		case "StatefulSet":
			err = yaml.UnmarshalStrict([]byte(doc), &m.sts)
		case "PodDisruptionBudget":
			err = yaml.UnmarshalStrict([]byte(doc), &m.pdb)
		default:
			err = fmt.Errorf("unexpected kind")
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("document %d (%s): %v", i, meta.Kind, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "\n"))
	}
	if len(m.sts.Spec.Template.Spec.Containers) != 1 {
		return nil, fmt.Errorf("%d containers, want ringgate alone", len(m.sts.Spec.Template.Spec.Containers))
	}
	return m, nil
}

// podConfig is the config a pod runs: the ConfigMap's file, with the
// environment the StatefulSet sets (secrets and per-pod values stand in).
func podConfig(t *testing.T, m *manifests) (*config.Config, error) {
	t.Helper()
	c := m.sts.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			v = "from-" + e.Name
		}
		env[e.Name] = v
	}
	env["POD_NAME"], env["POD_IP"] = "ringgate-0", "10.0.0.7"
	env["RINGGATE_SECRET"] = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=" // 32 bytes
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)             // Kubernetes' $(VAR)
	expand := func(s string) string {
		return ref.ReplaceAllStringFunc(s, func(m string) string { return env[m[2:len(m)-1]] })
	}
	getenv := func(k string) string { return expand(env[k]) }
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(m.cm.Data["config.toml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	if len(c.Args) < 2 {
		return nil, fmt.Errorf("the container's args %v name no config", c.Args)
	}
	return config.FromArgs(append([]string{"-config", path}, c.Args[2:]...), getenv)
}

// What the recipes' timeouts must outlast. The config's own values come
// from the config package (its defaults, the recipe's config file); these
// two are the nodes' code, which no config key sets.
const (
	// forwardMargin is what a node that hands a request to its tenant's
	// owner waits on top of the owner's budgets, cluster.forward_timeout
	// being 0 (docs/config.md; hop.Timeouts).
	forwardMargin = 5 * time.Second
	// afterDrain bounds a node's exit once its drain has ended: leaving
	// the gossip (1 s), giving its leases back (1 s), closing its server
	// (2 s), and a second for the rest (node.Node's stop).
	afterDrain = 5 * time.Second
)

// A liveness probe gives a busy node (a long GC pause, a container
// throttled at its CPU limit) this long to answer each probe, and this
// long of unanswered probes before a restart.
const (
	livenessAnswer = 5 * time.Second
	livenessMisses = time.Minute
)

// holds is how long a node running a config can keep a call going.
type holds struct {
	// first is the longest wait for an answer's first byte (for an answer
	// read whole, for all of it): the longest queue wait (a tenant's
	// class, or batch, which any request may ask for) plus the longest
	// upstream timeout, plus forwardMargin where a node forwarded it to
	// the owner (or cluster.forward_timeout when that is set and longer).
	first time.Duration
	// silence is the longest a call's connection may carry no byte either
	// way: first, or a stream's stream_idle_timeout between its chunks. A
	// stream's whole length has no bound.
	silence time.Duration
	// drain is node.drain_timeout as the node applies it.
	drain time.Duration
}

// holdsOf is what cfg can hold a call for. A config with no upstream
// counts the default upstream's timeouts.
func holdsOf(t *testing.T, cfg *config.Config) holds {
	t.Helper()
	ups := cfg.Upstreams
	if len(ups) == 0 {
		ups = defaultConfig(t).Upstreams
	}
	var timeout, idle time.Duration
	for _, u := range ups {
		timeout, idle = max(timeout, u.Timeout), max(idle, u.StreamIdleTimeout)
	}
	first := maxWait(cfg) + timeout + forwardMargin
	if f := cfg.Cluster.ForwardTimeout; f > 0 {
		first = max(maxWait(cfg)+timeout, f)
	}
	drain := cfg.Node.DrainTimeout
	if drain <= 0 {
		drain = 30 * time.Second // node.drain_timeout: 0 means 30 s
	}
	return holds{first: first, silence: max(first, idle), drain: drain}
}

// maxWait is the longest any request may wait in a queue under cfg.
func maxWait(cfg *config.Config) time.Duration {
	wait := max(cfg.Queue.InteractiveWait, cfg.Queue.BatchWait)
	for i := range cfg.Tenants {
		in, batch := cfg.Tenants[i].Waits(cfg.Queue)
		wait = max(wait, in, batch)
	}
	return wait
}

// defaultConfig is config.Default() with one upstream left to its
// defaults, as a file that names only what it must parses.
func defaultConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte("[[upstreams]]\nname = \"default\"\nbase_url = \"http://127.0.0.1:9\"\n"), "defaults.toml")
	if err != nil {
		t.Fatal(err)
	}
	if d := config.Default(); cfg.Queue != d.Queue || cfg.Node.DrainTimeout != d.Node.DrainTimeout {
		t.Fatalf("a parsed config's defaults (%+v, drain %v) are not config.Default()'s (%+v, drain %v)",
			cfg.Queue, cfg.Node.DrainTimeout, d.Queue, d.Node.DrainTimeout)
	}
	return cfg
}

// localConfig is deploy/local/node.toml as cluster.sh fills it in for
// node-1 (no Redis, which changes no timeout).
func localConfig(t *testing.T, toml string) (*config.Config, error) {
	t.Helper()
	toml = strings.NewReplacer("@NAME@", "node-1", "@HTTP@", "127.0.0.1:8081", "@GOSSIP@", "127.0.0.1:7951",
		"@JOIN@", "", "@REDIS@", "").Replace(toml)
	path := filepath.Join(t.TempDir(), "node.toml")
	if err := os.WriteFile(path, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	return config.FromArgs([]string{"-config", path}, func(string) string { return "" })
}

// haproxyDuration parses an HAProxy time: digits and a unit (us, ms, s,
// m, h, d), milliseconds without one.
func haproxyDuration(v string) (time.Duration, error) {
	m := regexp.MustCompile(`^([0-9]+)(us|ms|s|m|h|d)?$`).FindStringSubmatch(v)
	if m == nil {
		return 0, fmt.Errorf("%q is not an HAProxy time", v)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	unit := map[string]time.Duration{"us": time.Microsecond, "": time.Millisecond, "ms": time.Millisecond,
		"s": time.Second, "m": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[m[2]]
	return time.Duration(n) * unit, nil
}

// checkHAProxy lists what in the HAProxy config text would cut a call a
// node's config can hold. Its proxies in TCP mode carry the calls; there
// timeout client, server and tunnel cut a connection that carried no byte
// either way for that long, so each one set must outlast h.silence. A
// server marked down must keep its connections (a draining node finishes
// what it has): no on-marked-down shutdown-sessions.
func checkHAProxy(text string, h holds) []string {
	type proxy struct {
		name     string
		mode     string
		timeouts map[string]string
	}
	defaults := proxy{name: "defaults", timeouts: map[string]string{}}
	var proxies []*proxy
	cur := &defaults
	var problems []string
	for n, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "global":
			cur = &proxy{timeouts: map[string]string{}} // not a proxy
		case "defaults":
			defaults = proxy{name: "defaults", timeouts: map[string]string{}}
			cur = &defaults
		case "listen", "frontend", "backend":
			p := &proxy{name: strings.Join(f, " "), mode: defaults.mode, timeouts: map[string]string{}}
			for k, v := range defaults.timeouts {
				p.timeouts[k] = v
			}
			proxies = append(proxies, p)
			cur = p
		case "mode":
			if len(f) > 1 {
				cur.mode = f[1]
			}
		case "timeout":
			if len(f) > 2 {
				cur.timeouts[f[1]] = f[2]
			}
		}
		if strings.Contains(line, "on-marked-down") && strings.Contains(line, "shutdown-sessions") {
			problems = append(problems, fmt.Sprintf("line %d: on-marked-down shutdown-sessions cuts the calls of a node that drains", n+1))
		}
	}
	for _, p := range proxies {
		if p.mode != "tcp" {
			continue
		}
		for _, k := range []string{"client", "server", "tunnel"} {
			v, ok := p.timeouts[k]
			if !ok {
				continue
			}
			d, err := haproxyDuration(v)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: timeout %s: %v", p.name, k, err))
			} else if d <= h.silence {
				problems = append(problems, fmt.Sprintf("%s: timeout %s %s is not longer than %v, the longest a call's connection can stay silent "+
					"(queue wait + upstream timeout + %v, or stream_idle_timeout)", p.name, k, v, h.silence, forwardMargin))
			}
		}
	}
	if len(proxies) == 0 {
		problems = append(problems, "no proxy section")
	}
	return problems
}

// checkKubernetes lists what in the manifests would cut a call the pods'
// config can hold, or kill a node that drains or is busy: the drain must
// let a call in flight finish, the grace period cover the preStop pause,
// the drain and the exit after it; liveness must ask /healthz (200 while
// draining) and give a busy node time.
func checkKubernetes(m *manifests, h holds) []string {
	var problems []string
	spec := m.sts.Spec.Template.Spec
	c := spec.Containers[0]
	if h.drain < h.first {
		problems = append(problems, fmt.Sprintf("node.drain_timeout %v is shorter than %v, the longest a call can take to answer "+
			"(queue wait + upstream timeout + %v): a drain would cut it", h.drain, h.first, forwardMargin))
	}
	var preStop time.Duration
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		switch ps := c.Lifecycle.PreStop; {
		case ps.Sleep != nil:
			preStop = time.Duration(ps.Sleep.Seconds) * time.Second
		default:
			problems = append(problems, "the preStop hook is not a sleep: its length is unknown here")
		}
	}
	need := preStop + h.drain + afterDrain
	if spec.TerminationGracePeriodSeconds == nil {
		problems = append(problems, "no terminationGracePeriodSeconds: the default 30 s")
	} else if grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second; grace <= need {
		problems = append(problems, fmt.Sprintf("terminationGracePeriodSeconds %v is not more than the preStop pause %v + node.drain_timeout %v + %v of leaving: "+
			"a drain would be killed", grace, preStop, h.drain, afterDrain))
	}
	switch p := c.LivenessProbe; {
	case p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz":
		problems = append(problems, "the liveness probe must be GET /healthz, which answers 200 while the node drains")
	default:
		orDefault := func(v, d int32) int32 { // Kubernetes' default for a field left 0
			if v == 0 {
				return d
			}
			return v
		}
		answer := time.Duration(orDefault(p.TimeoutSeconds, 1)) * time.Second
		misses := time.Duration(orDefault(p.PeriodSeconds, 10)*orDefault(p.FailureThreshold, 3)) * time.Second
		if answer < livenessAnswer || misses < livenessMisses {
			problems = append(problems, fmt.Sprintf("the liveness probe restarts a node that misses %v of probes of %v each: "+
				"a busy node needs at least %v and %v", misses, answer, livenessMisses, livenessAnswer))
		}
	}
	if p := c.StartupProbe; p != nil && p.HTTPGet != nil && p.HTTPGet.Path == "/readyz" {
		problems = append(problems, "a startup probe on /readyz restarts a node that cannot join")
	}
	return problems
}

// checkLocal lists what in cluster.sh would cut the local cluster's work
// short, h being node.toml's: a node stopped is killed only after it has
// drained and left (kill_after), and the load waits for an answer longer
// than its calls can be held (load_timeout): interactive, read whole, to
// the tenants of cfg.
func checkLocal(script string, cfg *config.Config, h holds) []string {
	var problems []string
	m := regexp.MustCompile(`(?m)^kill_after=([0-9]+)\b`).FindStringSubmatch(script)
	if m == nil {
		problems = append(problems, "cluster.sh sets no kill_after=SECONDS")
	} else if n, _ := strconv.Atoi(m[1]); time.Duration(n)*time.Second <= h.drain+afterDrain {
		problems = append(problems, fmt.Sprintf("kill_after=%s: not more than node.toml's drain_timeout %v + %v of leaving", m[1], h.drain, afterDrain))
	}
	if !regexp.MustCompile(`kill -0 "\$pid" 2>/dev/null && kill -KILL`).MatchString(script) ||
		!strings.Contains(script, "seq $((kill_after * 10))") {
		problems = append(problems, "cluster.sh's stop does not wait kill_after seconds before its SIGKILL")
	}
	var timeout time.Duration
	for _, u := range cfg.Upstreams {
		timeout = max(timeout, u.Timeout)
	}
	var wait time.Duration
	for i := range cfg.Tenants {
		in, batch := cfg.Tenants[i].Waits(cfg.Queue)
		if cfg.Tenants[i].Priority == config.PriorityBatch {
			in = batch
		}
		wait = max(wait, in)
	}
	need := wait + timeout + forwardMargin
	m = regexp.MustCompile(`(?m)^load_timeout=(\S+)`).FindStringSubmatch(script)
	if m == nil || !strings.Contains(script, `-timeout "$load_timeout"`) {
		problems = append(problems, `cluster.sh sets no load_timeout= for the load's -timeout "$load_timeout"`)
	} else if d, err := time.ParseDuration(m[1]); err != nil || d <= need {
		problems = append(problems, fmt.Sprintf("load_timeout=%s: not more than %v, the longest the load's calls can be held "+
			"(their queue wait + the upstream's timeout + %v)", m[1], need, forwardMargin))
	}
	return problems
}

// recipes is every recipe's text and the configs they run.
type recipes struct {
	haproxy, k8s, script, nodeTOML string
}

func readRecipes(t *testing.T) recipes {
	t.Helper()
	var r recipes
	for path, dst := range map[string]*string{"haproxy/haproxy.cfg": &r.haproxy, "k8s/ringgate.yaml": &r.k8s,
		"local/cluster.sh": &r.script, "local/node.toml": &r.nodeTOML} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		*dst = string(b)
	}
	return r
}

// checkRecipes runs every check on r, against the holds of the defaults,
// the local node.toml and the Kubernetes ConfigMap's config: the HAProxy
// recipe fronts any of them.
func checkRecipes(t *testing.T, r recipes) []string {
	t.Helper()
	m, err := decodeManifests([]byte(r.k8s))
	if err != nil {
		return []string{"k8s: " + err.Error()}
	}
	podCfg, err := podConfig(t, m)
	if err != nil {
		return []string{"k8s: the ConfigMap's config: " + err.Error()}
	}
	localCfg, err := localConfig(t, r.nodeTOML)
	if err != nil {
		return []string{"local: node.toml: " + err.Error()}
	}
	def, pod, local := holdsOf(t, defaultConfig(t)), holdsOf(t, podCfg), holdsOf(t, localCfg)
	fronted := holds{silence: max(def.silence, pod.silence, local.silence)}
	var problems []string
	for _, p := range checkHAProxy(r.haproxy, fronted) {
		problems = append(problems, "haproxy: "+p)
	}
	for _, p := range checkKubernetes(m, pod) {
		problems = append(problems, "k8s: "+p)
	}
	for _, p := range checkLocal(r.script, localCfg, local) {
		problems = append(problems, "local: "+p)
	}
	return problems
}

// The recipes' timeouts outlast what the config can hold a call for,
// derived from the config package's defaults and the recipes' own configs:
// HAProxy's idle timeouts outlast the longest silence (queue wait +
// upstream timeout + the forwarding margin; a stream's idle timeout), the
// Kubernetes drain lets a call in flight finish, its grace period covers
// preStop + drain + exit, its liveness probe spares a draining or busy
// node, and the local cluster waits out a drain and its load's calls.
func TestRecipeTimeoutsCoverTheConfig(t *testing.T) {
	r := readRecipes(t)
	for _, p := range checkRecipes(t, r) {
		t.Error(p)
	}
	def := holdsOf(t, defaultConfig(t))
	t.Logf("with the defaults a call's connection can stay silent %v; a drain must last %v", def.silence, def.first)
}

// The checks catch a value too short: each recipe with one timeout cut,
// and the recipes as they are against a config whose upstream timeout
// grew.
func TestRecipeTimeoutChecksCatchShortValues(t *testing.T) {
	r := readRecipes(t)
	for _, c := range []struct {
		name, file, old, new, want string
	}{
		{"haproxy client 30s", "haproxy", "timeout client 675s", "timeout client 30s", "haproxy: listen gw: timeout client 30s"},
		{"haproxy server 10m", "haproxy", "timeout server 675s", "timeout server 10m", "haproxy: listen gw: timeout server 10m"},
		{"haproxy tunnel", "haproxy", "timeout check 1s", "timeout check 1s\n    timeout tunnel 120s", "timeout tunnel 120s"},
		{"haproxy cuts a drain", "haproxy", "check inter 200ms fall 1 rise 1", "check inter 200ms fall 1 rise 1 on-marked-down shutdown-sessions", "shutdown-sessions"},
		{"k8s grace 45", "k8s", "terminationGracePeriodSeconds: 700", "terminationGracePeriodSeconds: 45", "terminationGracePeriodSeconds 45s"},
		{"k8s grace without the preStop", "k8s", "terminationGracePeriodSeconds: 700", "terminationGracePeriodSeconds: 682", "terminationGracePeriodSeconds 11m22s"},
		{"k8s drain 30s", "k8s", `drain_timeout = "675s"`, `drain_timeout = "30s"`, "node.drain_timeout 30s is shorter"},
		{"k8s liveness on readyz", "k8s", "httpGet: {path: /healthz, port: http}", "httpGet: {path: /readyz, port: http}", "liveness probe must be GET /healthz"},
		{"k8s liveness impatient", "k8s", "            timeoutSeconds: 5\n", "            timeoutSeconds: 1\n", "a busy node needs"},
		{"local kill_after", "script", "kill_after=20 ", "kill_after=12 ", "kill_after=12"},
		{"local load timeout", "script", "load_timeout=20s ", "load_timeout=15s ", "load_timeout=15s"},
		{"local drain grew", "nodeTOML", `drain_timeout = "10s"`, `drain_timeout = "20s"`, "kill_after=20: not more than node.toml's drain_timeout 20s"},
		{"local upstream timeout grew", "nodeTOML", "\ntimeout = \"10s\"", "\ntimeout = \"30s\"", "load_timeout=20s: not more than 37s"},
		{"an upstream timeout grew", "k8s", `api_key = "env:OPENAI_API_KEY"`, "api_key = \"env:OPENAI_API_KEY\"\n    timeout = \"700s\"", "haproxy: listen gw: timeout client 675s is not longer than 12m45s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			mod := r
			file := map[string]*string{"haproxy": &mod.haproxy, "k8s": &mod.k8s, "script": &mod.script, "nodeTOML": &mod.nodeTOML}[c.file]
			if strings.Count(*file, c.old) != 1 {
				t.Fatalf("the %s recipe holds %q %d times, want once", c.file, c.old, strings.Count(*file, c.old))
			}
			*file = strings.Replace(*file, c.old, c.new, 1)
			problems := checkRecipes(t, mod)
			found := false
			for _, p := range problems {
				found = found || strings.Contains(p, c.want)
			}
			if !found {
				t.Errorf("with %q for %q: problems %q, want one saying %q", c.new, c.old, problems, c.want)
			}
		})
	}
}

// The image's config reads the cluster's secret from RINGGATE_SECRET, as
// docs/deploy.md tells a Docker user to pass it: with the variable set, a
// node that gossips is warned of nothing but having no seed to join.
func TestDockerConfigReadsTheSecret(t *testing.T) {
	t.Setenv("RINGGATE_SECRET", base64.StdEncoding.EncodeToString(make([]byte, 32)))
	t.Setenv("RINGGATE_ADMIN_TOKEN", "admin")
	cfg, err := config.Load("docker/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Cluster.Secret) == 0 || cfg.Node.Gossip == "" {
		t.Fatalf("secret of %d bytes, gossip %q: the image's node would gossip without the secret", len(cfg.Cluster.Secret), cfg.Node.Gossip)
	}
	for _, w := range cfg.Warnings() {
		if w.Key != "node.join" {
			t.Errorf("warning: %+v", w)
		}
	}
}
