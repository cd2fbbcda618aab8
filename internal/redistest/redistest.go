// Package redistest is test support only: it starts real redis-server
// processes on loopback (127.0.0.1, a free port, no persistence) for the
// tests of packages that talk to Redis, and lets a test stop, stall
// (SIGSTOP), resume and restart them to exercise failure handling. It is
// never imported by non-test code.
package redistest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// SkipEnv names the environment variable that turns a missing redis-server
// into a skipped test ("1") instead of a failed one.
const SkipEnv = "RINGGATE_SKIP_REDIS"

const (
	startTimeout = 5 * time.Second // until the server answers PING
	stopGrace    = 3 * time.Second // from SIGTERM to SIGKILL
)

// Server is a redis-server process started by Start.
type Server struct {
	tb   testing.TB
	bin  string
	dir  string
	port int
	opts Options

	mu     sync.Mutex
	proc   *process // nil when stopped
	paused bool
	resume *time.Timer // pending automatic Resume of Pause(d)
}

type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd.Wait returned
}

// Start starts a redis-server on a free 127.0.0.1 port, waits until it
// answers PING and stops it when the test ends. It fails the test when
// redis-server cannot be found or started, or skips it when the environment
// sets RINGGATE_SKIP_REDIS=1 and redis-server is missing.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return StartWith(tb, Options{})
}

// Options are what a server is started with beyond Start's defaults.
type Options struct {
	// Args are more redis-server arguments, e.g. "--requirepass", "pw".
	Args []string
	// TLS: the server speaks TLS only (no plain port), with these files.
	TLS *TLSFiles
	// Monitor: the server is a Sentinel (redis-server --sentinel)
	// watching the master at Monitor under the name MasterName.
	Monitor, MasterName string
}

// StartWith is Start with options.
func StartWith(tb testing.TB, o Options) *Server {
	tb.Helper()
	bin, err := findBinary()
	if err != nil {
		if os.Getenv(SkipEnv) == "1" {
			tb.Skipf("redistest: %v (skipped: %s=1)", err, SkipEnv)
		}
		tb.Fatalf("redistest: %v; install redis-server (Debian: apt-get install redis-server) or set %s=1 to skip tests that need it", err, SkipEnv)
	}
	s := &Server{tb: tb, bin: bin, dir: tb.TempDir(), opts: o}
	tb.Cleanup(s.Stop)
	// A free port found by listening on :0 can be taken by someone else
	// before redis-server binds it: try a few.
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			tb.Fatalf("redistest: find a free port: %v", err)
		}
		s.port = port
		if lastErr = s.start(); lastErr == nil {
			return s
		}
	}
	tb.Fatalf("redistest: %v", lastErr)
	return nil
}

// Addr is the server's "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// PID is the server process's id, or 0 while it is stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Stop terminates the server (SIGTERM, SIGKILL after 3 s) and waits for it
// to exit. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

// Kill ends the server with SIGKILL, as a crash does: no shutdown, no
// last words to its clients or replicas.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancelResumeLocked()
	if p := s.proc; p != nil {
		_ = p.cmd.Process.Kill()
		<-p.exited
		s.proc = nil
	}
}

// Pause stalls the server with SIGSTOP: it keeps its port and accepts TCP
// connections (the kernel does), but answers nothing. With d > 0 it is
// resumed automatically after d; otherwise it stays stalled until Resume,
// Restart or Stop.
func (s *Server) Pause(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		s.tb.Fatalf("redistest: Pause of a stopped server")
	}
	s.cancelResumeLocked()
	if err := s.proc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.tb.Fatalf("redistest: SIGSTOP: %v", err)
	}
	s.paused = true
	if d > 0 {
		s.resume = time.AfterFunc(d, s.Resume)
	}
}

// Resume continues a paused server (SIGCONT). It does nothing if the server
// is not paused.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancelResumeLocked()
	s.continueLocked()
}

// Restart stops the server and starts a new, empty one on the same port,
// waiting until it answers PING.
func (s *Server) Restart() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
	var err error
	// The port is normally free at once (redis-server sets SO_REUSEADDR);
	// retry briefly in case the old process's socket lingers.
	deadline := time.Now().Add(startTimeout)
	for {
		if err = s.startLocked(); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		s.tb.Fatalf("redistest: restart on port %d: %v", s.port, err)
	}
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startLocked()
}

func (s *Server) startLocked() error {
	logPath := filepath.Join(s.dir, "redis-"+strconv.Itoa(s.port)+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--dir", s.dir,
	}
	if s.opts.Monitor == "" {
		args = append(args, "--save", "", "--appendonly", "no")
	}
	if t := s.opts.TLS; t != nil {
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(s.port),
			"--tls-cert-file", t.CertFile, "--tls-key-file", t.KeyFile, "--tls-ca-cert-file", t.CAFile, "--tls-auth-clients", "no")
	}
	if s.opts.Monitor != "" {
		// A Sentinel rewrites its config file: it needs one of its own.
		conf := filepath.Join(s.dir, "sentinel-"+strconv.Itoa(s.port)+".conf")
		host, port, _ := net.SplitHostPort(s.opts.Monitor)
		text := fmt.Sprintf("sentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %[1]s 1000\nsentinel failover-timeout %[1]s 2000\n",
			s.opts.MasterName, host, port)
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return err
		}
		args = append([]string{conf, "--sentinel"}, args...)
	}
	args = append(args, s.opts.Args...)
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	s.proc = p
	s.paused = false

	addr := s.Addr()
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-p.exited:
			s.proc = nil
			return fmt.Errorf("redis-server on %s exited at start (%v); log:\n%s", addr, cmd.ProcessState, tail(logPath))
		default:
		}
		if ping(addr, s.opts.TLS, 200*time.Millisecond) == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.stopLocked()
			return fmt.Errorf("redis-server on %s did not answer PING within %v; log:\n%s", addr, startTimeout, tail(logPath))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *Server) stopLocked() {
	s.cancelResumeLocked()
	p := s.proc
	if p == nil {
		return
	}
	s.continueLocked() // a stopped process would not act on SIGTERM
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(stopGrace):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	s.proc = nil
}

func (s *Server) continueLocked() {
	if s.proc != nil && s.paused {
		_ = s.proc.cmd.Process.Signal(syscall.SIGCONT)
	}
	s.paused = false
}

func (s *Server) cancelResumeLocked() {
	if s.resume != nil {
		s.resume.Stop()
		s.resume = nil
	}
}

func findBinary() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/local/bin/redis-server"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("redis-server not found on PATH, in /usr/bin or in /usr/local/bin")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ping sends an inline PING and expects +PONG (or, from a server that
// wants AUTH first, -NOAUTH: it is up).
func ping(addr string, t *TLSFiles, timeout time.Duration) error {
	var c net.Conn
	var err error
	if t != nil {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) // liveness only
	} else {
		c, err = net.DialTimeout("tcp", addr, timeout)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" && !strings.HasPrefix(line, "-NOAUTH") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
