package hop

import (
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// timeoutErr is a connect that took longer than its budget.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// slowPeer is a peer whose connects all time out; it records each budget.
type slowPeer struct {
	mu      sync.Mutex
	budgets []time.Duration
}

func (s *slowPeer) dial(_ string, d time.Duration) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.budgets = append(s.budgets, d)
	return nil, timeoutErr{}
}

func (s *slowPeer) take() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.budgets
	s.budgets = nil
	return b
}

func send(t *testing.T, p *Pool, timeout time.Duration) error {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("/x")
	req.Header.SetHost("peer")
	req.Header.SetMethod(fasthttp.MethodPost)
	if timeout > 0 {
		return p.Call("peer", req, resp, timeout)
	}
	return p.Hop("peer", req, resp)
}

// A hop to a peer slow to connect, that answered before, gets a second,
// patient try; a call's tries are capped by its timeout; a slow connect
// marks the peer down only the second time in a row; a call never does.
func TestSlowConnectPatienceAndDownMarks(t *testing.T) {
	slow := &slowPeer{}
	now := time.Now().UnixNano()
	p := New(Config{Connect: 15 * time.Millisecond, First: time.Second, Idle: time.Second, Dial: slow.dial,
		Clock: func() int64 { return now }})

	if err := send(t, p, 60*time.Millisecond); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("call: %v, want ErrUnreachable", err)
	}
	b := slow.take()
	if len(b) != 2 || b[0] != 15*time.Millisecond || b[1] > 60*time.Millisecond {
		t.Fatalf("call's connect budgets %v, want 15ms then at most the call's 60ms", b)
	}
	if p.Down("peer") {
		t.Fatal("a call marked the peer down")
	}

	if err := send(t, p, 0); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("hop: %v, want ErrUnreachable", err)
	}
	if b := slow.take(); len(b) != 2 || b[0] != 15*time.Millisecond || b[1] != 150*time.Millisecond {
		t.Fatalf("hop's connect budgets %v, want 15ms then 150ms (10 × connect)", b)
	}
	if p.Down("peer") {
		t.Fatal("one slow connect marked the peer down: a busy peer that is alive deserves a second")
	}
	if err := send(t, p, 0); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("second hop: %v, want ErrUnreachable", err)
	}
	if b := slow.take(); len(b) != 1 {
		t.Fatalf("second hop's connect budgets %v, want one try: it was slow before", b)
	}
	if !p.Down("peer") {
		t.Fatal("two slow connects in a row: the peer is not marked down")
	}
	now += int64(DownFor)
	if p.Down("peer") {
		t.Fatal("still down after DownFor on the injected clock")
	}
}

// A refused connection marks the peer down at once; an answer marks it up.
func TestRefusedMarksDownAnswerMarksUp(t *testing.T) {
	n := NewInmem()
	now := time.Now().UnixNano()
	p := New(Config{Connect: 15 * time.Millisecond, First: time.Second, Idle: time.Second, Dial: n.Dialer("edge"),
		Clock: func() int64 { return now }})
	if err := send(t, p, 0); !errors.Is(err, ErrUnreachable) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("hop to nobody: %v, want a refused connection, unreachable", err)
	}
	if !p.Down("peer") {
		t.Fatal("a refused connection did not mark the peer down")
	}
	ln := n.Listen("peer")
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") }}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	now += int64(DownFor)
	if err := send(t, p, 0); err != nil {
		t.Fatalf("hop to a listening peer: %v", err)
	}
	if p.Down("peer") {
		t.Fatal("an answer left the peer marked down")
	}
}

// A partition refuses new connections across the cut, both ways, until
// Heal; a node outside it still connects.
func TestInmemPartition(t *testing.T) {
	n := NewInmem()
	for _, name := range []string{"a", "b", "c"} {
		ln := n.Listen(name)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
		t.Cleanup(func() { _ = ln.Close() })
	}
	dial := func(from, to string) error {
		c, err := n.Dialer(from)(to, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err
	}
	n.Partition([]string{"a", "b"}, []string{"c"})
	for _, l := range [][2]string{{"a", "c"}, {"c", "a"}, {"b", "c"}, {"c", "b"}} {
		if err := dial(l[0], l[1]); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s→%s across the cut: %v, want refused", l[0], l[1], err)
		}
	}
	if err := dial("a", "b"); err != nil {
		t.Errorf("a→b on one side: %v", err)
	}
	n.Heal()
	if err := dial("c", "a"); err != nil {
		t.Errorf("c→a after Heal: %v", err)
	}
	var oe *net.OpError
	if err := dial("a", "nobody"); !errors.As(err, &oe) || !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a→nobody: %v, want refused", err)
	}
}
