package redistest

import (
	"net"
	"testing"
	"time"
)

func TestServerLifecycle(t *testing.T) {
	s := Start(t)
	addr := s.Addr()
	if err := ping(addr, nil, time.Second); err != nil {
		t.Fatalf("ping after Start: %v", err)
	}

	s.Pause(0)
	if err := ping(addr, nil, 100*time.Millisecond); err == nil {
		t.Fatal("a paused server answered PING")
	}
	s.Resume()
	if err := ping(addr, nil, time.Second); err != nil {
		t.Fatalf("ping after Resume: %v", err)
	}

	s.Pause(150 * time.Millisecond) // resumes by itself
	if err := ping(addr, nil, 50*time.Millisecond); err == nil {
		t.Fatal("a paused server answered PING")
	}
	if err := ping(addr, nil, 2*time.Second); err != nil {
		t.Fatalf("ping after an automatic resume: %v", err)
	}

	pid := s.PID()
	s.Pause(0) // Restart must cope with a stopped process
	s.Restart()
	if s.Addr() != addr {
		t.Fatalf("Restart moved the server from %s to %s", addr, s.Addr())
	}
	if s.PID() == pid || s.PID() == 0 {
		t.Fatalf("Restart kept pid %d (now %d)", pid, s.PID())
	}
	if err := ping(addr, nil, time.Second); err != nil {
		t.Fatalf("ping after Restart: %v", err)
	}

	s.Stop()
	s.Stop() // idempotent
	if s.PID() != 0 {
		t.Fatal("PID after Stop")
	}
	if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		c.Close()
		t.Fatal("the port still accepts connections after Stop")
	}
}

func TestStopsPausedServerAtCleanup(t *testing.T) {
	var s *Server
	t.Run("inner", func(t *testing.T) {
		s = Start(t)
		s.Pause(0)
	})
	if s.PID() != 0 {
		t.Fatal("server still running after its test's cleanup")
	}
	if c, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond); err == nil {
		c.Close()
		t.Fatal("the port still accepts connections after cleanup")
	}
}
