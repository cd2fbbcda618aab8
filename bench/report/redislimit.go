package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/bench/seedlimit"
)

// redisLimiter is a bare fasthttp proxy that limits each tenant (its
// bearer key) to limit requests per window with the seed article's Lua
// sliding window (package seedlimit: one Redis round trip per request),
// and forwards what it admits to the provider.
type redisLimiter struct {
	ln     net.Listener
	srv    *fasthttp.Server
	up     *fasthttp.HostClient
	rdb    *redis.Client
	window time.Duration
	limit  int
	seq    atomic.Uint64
}

func startRedisLimiter(redisAddr, upstream string, window time.Duration, limit int) (*redisLimiter, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &redisLimiter{ln: ln, window: window, limit: limit,
		up:  &fasthttp.HostClient{Addr: upstream, MaxConns: 1024, ReadTimeout: 30 * time.Second},
		rdb: redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 64, MinIdleConns: 8})}
	p.srv = &fasthttp.Server{Handler: p.serve, NoDefaultServerHeader: true, NoDefaultDate: true}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *redisLimiter) serve(ctx *fasthttp.RequestCtx) {
	key := string(ctx.Request.Header.Peek("Authorization"))
	now := time.Now().UnixMilli()
	member := strconv.FormatUint(p.seq.Add(1), 10) + "@" + p.ln.Addr().String()
	ok, err := seedlimit.Take(context.Background(), p.rdb, "seed:"+key, now, p.window.Milliseconds(), int64(p.limit), 1, member)
	if err != nil {
		ctx.Error("redis: "+err.Error(), fasthttp.StatusServiceUnavailable)
		return
	}
	if !ok {
		ctx.Error(`{"error":{"type":"requests","code":"rate_limit_exceeded"}}`, fasthttp.StatusTooManyRequests)
		return
	}
	if err := p.up.Do(&ctx.Request, &ctx.Response); err != nil {
		ctx.Error("upstream: "+err.Error(), fasthttp.StatusBadGateway)
	}
}

func (p *redisLimiter) Addr() string { return p.ln.Addr().String() }

func (p *redisLimiter) Close() {
	_ = p.srv.Shutdown()
	_ = p.rdb.Close()
}

// redisServer is a redis-server this program started, stopped by PID.
type redisServer struct {
	cmd  *exec.Cmd
	addr string
}

func startRedis() (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is needed for the Redis baseline (Debian: apt-get install redis-server): %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	dir, err := os.MkdirTemp("", "ringgate-report-redis")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &redisServer{cmd: cmd, addr: "127.0.0.1:" + strconv.Itoa(port)}
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	defer func() { _ = rdb.Close() }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := rdb.Ping(context.Background()).Err(); err == nil {
			return s, nil
		} else if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("redis-server on %s: %w", s.addr, err)
		}
	}
}

// flush empties the server.
func (s *redisServer) flush() {
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	defer func() { _ = rdb.Close() }()
	_ = rdb.FlushAll(context.Background()).Err()
}

func (s *redisServer) Stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// redisVersion is what redis-server says it is, for the report.
func redisVersion() string {
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "?"
	}
	// "Redis server v=7.0.15 sha=… malloc=… bits=64 build=…": the version.
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return "Redis " + v
		}
	}
	return strings.TrimSpace(string(out))
}
