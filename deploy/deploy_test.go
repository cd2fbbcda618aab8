package deploy

import (
	"bytes"
	"debug/elf"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	var (
		cm       corev1.ConfigMap
		services = map[string]corev1.Service{}
		sts      appsv1.StatefulSet
		pdb      policyv1.PodDisruptionBudget
	)
	for i, doc := range strings.Split(string(raw), "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil || meta.Kind == "" {
			continue // the comment before the first document
		}
		var err error
		switch meta.Kind {
		case "ConfigMap":
			err = yaml.UnmarshalStrict([]byte(doc), &cm)
		case "Service":
			var s corev1.Service
			err = yaml.UnmarshalStrict([]byte(doc), &s)
			services[s.Name] = s
		case "StatefulSet":
			err = yaml.UnmarshalStrict([]byte(doc), &sts)
		case "PodDisruptionBudget":
			err = yaml.UnmarshalStrict([]byte(doc), &pdb)
		default:
			t.Errorf("document %d: unexpected kind %s", i, meta.Kind)
		}
		if err != nil {
			t.Errorf("document %d (%s): %v", i, meta.Kind, err)
		}
	}
	if t.Failed() {
		return
	}
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

	// The config the pods run: the ConfigMap's file, with the environment
	// the StatefulSet sets (secrets and per-pod values stand in).
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
	if err := os.WriteFile(path, []byte(cm.Data["config.toml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.FromArgs(append([]string{"-config", path}, c.Args[2:]...), getenv)
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
