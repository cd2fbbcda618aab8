//go:build e2e

package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is one child process, its combined stdout/stderr in a log file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	started time.Time

	done  chan struct{} // closed once Wait returned
	state *os.ProcessState
	err   error
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitExit waits up to timeout for the process to exit and reports its exit
// code (-1 when killed by a signal) and whether it exited in time.
func (p *proc) waitExit(timeout time.Duration) (int, bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		if !p.exited() {
			return 0, false
		}
	}
	if p.state == nil {
		return -1, true
	}
	return p.state.ExitCode(), true
}

// stop ends the process by its PID: SIGTERM, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *proc) log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

func (p *proc) tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.log(), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("… (%d earlier lines)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// procs starts child processes for one test and stops every one of them, by
// PID and in parallel, when the test ends; on failure it logs the tail of
// each process's log.
type procs struct {
	t   *testing.T
	dir string

	mu   sync.Mutex
	list []*proc
	seq  map[string]int
}

func newProcs(t *testing.T, dir string) *procs {
	ps := &procs{t: t, dir: dir, seq: map[string]int{}}
	t.Cleanup(func() {
		ps.mu.Lock()
		list := append([]*proc(nil), ps.list...)
		ps.mu.Unlock()
		var wg sync.WaitGroup
		for _, p := range list {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.stop(5 * time.Second)
			}()
		}
		wg.Wait()
		if t.Failed() {
			for _, p := range list {
				t.Logf("---- %s (%s) log tail ----\n%s", p.name, p.logPath, p.tail(40))
			}
		}
	})
	return ps
}

// childEnv is the environment without RINGGATE_* variables, which would
// override the flags and config the test sets.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RINGGATE_") {
			env = append(env, kv)
		}
	}
	return env
}

// start starts path with args, logging to <dir>/<name>[-N].log.
func (ps *procs) start(name, path string, args ...string) (*proc, error) {
	ps.mu.Lock()
	ps.seq[name]++
	file := name + ".log"
	if n := ps.seq[name]; n > 1 {
		file = fmt.Sprintf("%s-%d.log", name, n)
	}
	ps.mu.Unlock()
	logPath := filepath.Join(ps.dir, file)
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own copy
	cmd := exec.Command(path, args...)
	cmd.Env = childEnv()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, started: time.Now(), done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.done)
	}()
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
	return p, nil
}

// launch starts a process and waits until ready reports true. mk builds the
// arguments of each attempt (fresh ports); a process that exits before it is
// ready because an address was taken is started again, at most 3 times.
func (ps *procs) launch(name, path string, timeout time.Duration, mk func() (args []string, ready func() bool, err error)) (*proc, error) {
	for attempt := 1; ; attempt++ {
		args, ready, err := mk()
		if err != nil {
			return nil, err
		}
		p, err := ps.start(name, path, args...)
		if err != nil {
			return nil, err
		}
		deadline := time.Now().Add(timeout)
		for !ready() {
			if p.exited() {
				out := p.log()
				if attempt < 3 && (strings.Contains(out, "address already in use") || strings.Contains(out, "cannot bind")) {
					break
				}
				return p, fmt.Errorf("%s exited before it was ready (%v):\n%s", name, p.err, p.tail(30))
			}
			if time.Now().After(deadline) {
				return p, fmt.Errorf("%s not ready after %s:\n%s", name, timeout, p.tail(30))
			}
			time.Sleep(25 * time.Millisecond)
		}
		if !p.exited() {
			return p, nil
		}
	}
}

// launchNode starts the ringgate node n on free loopback ports (keeping its
// HTTP port when n.listen is set already: HAProxy may list it), its config
// (config, called with n's addresses filled in) written to
// <dir>/<name>.toml, and waits up to timeout for its /readyz.
func (ps *procs) launchNode(n *gwNode, timeout time.Duration, config func() string) error {
	fixed := n.listen != ""
	p, err := ps.launch(n.name, binary, timeout, func() ([]string, func() bool, error) {
		if !fixed {
			port, err := freePort(false)
			if err != nil {
				return nil, nil, err
			}
			n.listen = addr(port)
		}
		port, err := freePort(true)
		if err != nil {
			return nil, nil, err
		}
		n.gossip = addr(port)
		cfg := filepath.Join(ps.dir, n.name+".toml")
		if err := os.WriteFile(cfg, []byte(config()), 0o600); err != nil {
			return nil, nil, err
		}
		return []string{"-config", cfg}, answers("http://"+n.listen+"/readyz", http.StatusOK), nil
	})
	n.p = p
	return err
}

var (
	portsMu sync.Mutex
	handed  = map[int]bool{}
)

// freePort returns a loopback port that was free just now (for TCP, and for
// UDP too when udp is set: memberlist binds both) and that this process has
// not handed out before.
func freePort(udp bool) (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		ok := !handed[port]
		if ok && udp {
			u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				ok = false
			} else {
				u.Close()
			}
		}
		l.Close()
		if ok {
			handed[port] = true
			return port, nil
		}
	}
	return 0, errors.New("free port: none found in 100 tries")
}

func addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// adminClient is for health and admin calls: short timeouts, no pooling.
var adminClient = &http.Client{
	Timeout:   2 * time.Second,
	Transport: &http.Transport{DisableKeepAlives: true},
}

func get(url string) (int, []byte, error) { return getWith(adminClient, url) }

func getWith(c *http.Client, url string) (int, []byte, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func answers(url string, status int) func() bool {
	return func() bool {
		code, _, err := get(url)
		return err == nil && code == status
	}
}

// logLines returns the log's JSON lines whose "msg" is msg.
func logLines(log, msg string) []string {
	var out []string
	needle := []byte(`"msg":"` + msg + `"`)
	for line := range bytes.Lines([]byte(log)) {
		if bytes.Contains(line, needle) {
			out = append(out, string(bytes.TrimSpace(line)))
		}
	}
	return out
}
