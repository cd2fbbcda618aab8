package gossip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// ---- log capture ----

// logRec is one captured slog record, attributes flattened to strings.
type logRec struct {
	at    time.Time
	level slog.Level
	msg   string
	attrs map[string]string
}

// logCapture records every record of the loggers it hands out, so tests can
// measure when memberlist logged something (e.g. "Suspect x has failed").
// With GOSSIP_TEST_LOG=1 records are also written to the test log.
type logCapture struct {
	t    *testing.T
	mu   sync.Mutex
	recs []logRec
	echo bool
}

func newLogCapture(t *testing.T) *logCapture {
	return &logCapture{t: t, echo: os.Getenv("GOSSIP_TEST_LOG") == "1"}
}

func (c *logCapture) logger() *slog.Logger { return slog.New(&capHandler{c: c}) }

func (c *logCapture) first(pred func(logRec) bool) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.recs {
		if pred(r) {
			return r.at, true
		}
	}
	return time.Time{}, false
}

func (c *logCapture) count(pred func(logRec) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := 0
	for _, r := range c.recs {
		if pred(r) {
			k++
		}
	}
	return k
}

type capHandler struct {
	c     *logCapture
	attrs []slog.Attr
}

func (h *capHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *capHandler) WithGroup(string) slog.Handler            { return h }
func (h *capHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &capHandler{c: h.c, attrs: append(slices.Clone(h.attrs), as...)}
}

func (h *capHandler) Handle(_ context.Context, r slog.Record) error {
	rec := logRec{at: time.Now(), level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.c.mu.Lock()
	h.c.recs = append(h.c.recs, rec)
	h.c.mu.Unlock()
	if h.c.echo && r.Level >= slog.LevelInfo {
		h.c.t.Logf("%s %s %s %v", rec.at.Format("15:04:05.000"), r.Level, r.Message, rec.attrs)
	}
	return nil
}

// ---- nodes ----

func itoa(i int) string { return strconv.Itoa(i) }

func httpAddrOf(name string) string { return "http-" + name + ":8080" }

// startNode starts a node on 127.0.0.1:0 unless the config says otherwise and
// shuts it down at the end of the test.
func startNode(t *testing.T, lc *logCapture, cfg Config) *Node {
	t.Helper()
	if cfg.BindAddr == "" && cfg.Transport == nil {
		cfg.BindAddr = "127.0.0.1:0"
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = httpAddrOf(cfg.Name)
	}
	if cfg.Logger == nil {
		cfg.Logger = lc.logger()
	}
	n, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start(%s): %v", cfg.Name, err)
	}
	t.Cleanup(func() { _ = n.Shutdown() })
	return n
}

// startCluster starts names[0] as a new cluster and the others with seed
// names[0] (or, with chain, the previous node), and waits until every node
// sees all of them.
func startCluster(t *testing.T, lc *logCapture, names []string, chain bool, mod func(*Config)) []*Node {
	t.Helper()
	var nodes []*Node
	for i, name := range names {
		cfg := Config{Name: name}
		if i > 0 {
			seed := nodes[0]
			if chain {
				seed = nodes[i-1]
			}
			cfg.Seeds = []string{seed.GossipAddr()}
		}
		if mod != nil {
			mod(&cfg)
		}
		nodes = append(nodes, startNode(t, lc, cfg))
	}
	waitFor(t, 10*time.Second, "cluster formed", func() bool {
		for _, n := range nodes {
			if !sameNames(n.Members(), names...) {
				return false
			}
		}
		return true
	})
	return nodes
}

func names(ms []Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}

func sameNames(ms []Member, want ...string) bool {
	w := slices.Clone(want)
	slices.Sort(w)
	return slices.Equal(names(ms), w)
}

func findMember(ms []Member, name string) (Member, bool) {
	for _, m := range ms {
		if m.Name == name {
			return m, true
		}
	}
	return Member{}, false
}

// waitFor polls cond every 10 ms until it holds or timeout passes, and
// returns how long it took.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if cond() {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %v waiting for: %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holdFor checks cond every 20 ms for d and fails as soon as it is false.
func holdFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !cond() {
			t.Fatalf("condition broke: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort returns a port that was free for TCP and UDP on 127.0.0.1.
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// reservePort holds a loopback port that nobody listens on: a TCP socket
// bound to it without listening, so a connection is refused as at a port
// nobody uses, and a UDP socket on it. No other socket, of this test
// process or another package's running beside it, takes the port until
// release.
func reservePort(t *testing.T) (port int, release func()) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		_ = syscall.Close(fd)
		t.Fatal(err)
	}
	port = sa.(*syscall.SockaddrInet4).Port
	u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		_ = syscall.Close(fd)
		t.Skipf("udp port %d taken: %v", port, err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			_ = syscall.Close(fd)
			_ = u.Close()
		})
	}
	t.Cleanup(release)
	return port, release
}

// ---- fault-injection transport ----

// testNetwork is a switchboard shared by dropTransports: isolating an
// address drops every packet and refuses every stream to or from it, in both
// directions (a clean network partition), without closing any socket.
type testNetwork struct {
	mu       sync.Mutex
	isolated map[string]bool
}

func newTestNetwork() *testNetwork { return &testNetwork{isolated: map[string]bool{}} }

func (tn *testNetwork) isolate(addr string, on bool) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	tn.isolated[addr] = on
}

func (tn *testNetwork) cut(from, to string) bool {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return from != to && (tn.isolated[from] || tn.isolated[to])
}

var errPartitioned = errors.New("test network: partitioned")

// dropTransport wraps memberlist's real NetTransport (so failure detection
// runs over real sockets) and consults the testNetwork on every send/dial.
type dropTransport struct {
	*memberlist.NetTransport
	self string
	tn   *testNetwork
}

func newDropTransport(t *testing.T, tn *testNetwork) *dropTransport {
	t.Helper()
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{"127.0.0.1"},
		BindPort:  0,
		Logger:    log.New(io.Discard, "", 0),
	})
	if err != nil {
		t.Fatal(err)
	}
	return &dropTransport{NetTransport: nt, self: net.JoinHostPort("127.0.0.1", strconv.Itoa(nt.GetAutoBindPort())), tn: tn}
}

func (d *dropTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if d.tn.cut(d.self, addr) {
		return time.Now(), nil // a UDP packet lost on the way
	}
	return d.NetTransport.WriteTo(b, addr)
}

func (d *dropTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if d.tn.cut(d.self, a.Addr) {
		return time.Now(), nil
	}
	return d.NetTransport.WriteToAddress(b, a)
}

func (d *dropTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if d.tn.cut(d.self, addr) {
		return nil, fmt.Errorf("dial %s: %w", addr, errPartitioned)
	}
	return d.NetTransport.DialTimeout(addr, timeout)
}

func (d *dropTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if d.tn.cut(d.self, a.Addr) {
		return nil, fmt.Errorf("dial %s: %w", a.Addr, errPartitioned)
	}
	return d.NetTransport.DialAddressTimeout(a, timeout)
}

var _ memberlist.NodeAwareTransport = (*dropTransport)(nil)

// rawDelegate lets a bare memberlist advertise arbitrary metadata.
type rawDelegate struct{ meta []byte }

func (r rawDelegate) NodeMeta(int) []byte           { return r.meta }
func (rawDelegate) NotifyMsg([]byte)                {}
func (rawDelegate) GetBroadcasts(int, int) [][]byte { return nil }
func (rawDelegate) LocalState(bool) []byte          { return nil }
func (rawDelegate) MergeRemoteState([]byte, bool)   {}
func isSuspectLog(name string) func(logRec) bool {
	return func(r logRec) bool {
		return r.msg == "memberlist" && strings.HasPrefix(r.attrs["detail"], "Suspect "+name+" has failed")
	}
}
