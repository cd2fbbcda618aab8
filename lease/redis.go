package lease

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringgate/ringgate/redisconn"
)

// A budget's window is one Redis hash: lo and hi (the oldest bucket
// counted, the newest charged), sr and st (the sums over the counted
// buckets), and r<bucket>, t<bucket> per bucket. Each call first drops
// the buckets that left the window, subtracting them from the sums: every
// bucket is dropped once, so a call costs O(1) amortized and never scans
// the window (after a long idle spell the whole hash is dropped at once).
const advanceLua = `
local k = KEYS[1]
local now = tonumber(ARGV[1])
local cut = now - SPAN - 1
local v = redis.call('HMGET', k, 'lo', 'hi', 'sr', 'st', 'gen', 'fence')
local lo, hi = tonumber(v[1]), tonumber(v[2])
local sr, st = tonumber(v[3]) or 0, tonumber(v[4]) or 0
local gen, fence = v[5], v[6]
if lo == nil then
  -- No window (first use, the key expired, or Redis lost it): a new
  -- generation.
  lo, hi, sr, st = cut + 1, cut, 0, 0
  gen, fence = ARGV[GENARG], false
elseif hi <= cut then
  -- Everything left the window: the same one, emptied at once.
  redis.call('DEL', k)
  lo, hi, sr, st = cut + 1, cut, 0, 0
else
  while lo <= cut do
    local f = redis.call('HMGET', k, 'r' .. lo, 't' .. lo)
    if f[1] or f[2] then
      sr = sr - (tonumber(f[1]) or 0)
      st = st - (tonumber(f[2]) or 0)
      redis.call('HDEL', k, 'r' .. lo, 't' .. lo)
    end
    lo = lo + 1
  end
end
local function add(b, r, t)
  if b < lo then return end
  if r ~= 0 then redis.call('HINCRBY', k, 'r' .. b, r); sr = sr + r end
  if t ~= 0 then redis.call('HINCRBY', k, 't' .. b, t); st = st + t end
  if b > hi then hi = b end
end
local function save(ttl)
  redis.call('HSET', k, 'lo', lo, 'hi', hi, 'sr', sr, 'st', st, 'gen', gen)
  if fence then redis.call('HSET', k, 'fence', 1) end
  redis.call('PEXPIRE', k, ttl)
end
`

// advance is advanceLua for a script whose ARGV[genArg] is the generation
// a window made by the call gets (gen: the hash was made anew — first use,
// a long idle spell, or a Redis that lost its data).
func advance(genArg int) string {
	return strings.NewReplacer("SPAN", strconv.Itoa(Span), "GENARG", strconv.Itoa(genArg)).Replace(advanceLua)
}

// grantScript: ARGV now, expires, limit r, limit t, want r, want t, ttl ms,
// min r, min t, gen, fence ("1": grant nothing now or ever again).
var grantScript = redis.NewScript(advance(10) + `
local exp = tonumber(ARGV[2])
if ARGV[11] == '1' then fence = '1' end
local function grant(limit, want, least, used)
  if limit <= 0 then return 0 end
  local g = limit - used
  if want < g then g = want end
  if g < least or g < 0 then g = 0 end
  return g
end
local gr, gt, fenced = 0, 0, 1
if not fence then
  gr = grant(tonumber(ARGV[3]), tonumber(ARGV[5]), tonumber(ARGV[8]), sr)
  gt = grant(tonumber(ARGV[4]), tonumber(ARGV[6]), tonumber(ARGV[9]), st)
  fenced = 0
end
add(exp, gr, gt)
save(ARGV[7])
return {gr, gt, sr, st, lo, tonumber(gen), fenced}
`)

// returnScript: ARGV now, expires, granted r, granted t, ttl ms, gen (for a
// window made anew), the block's gen, then bucket, used r, used t for each
// use.
var returnScript = redis.NewScript(advance(6) + `
-- A window other than the one the block was granted in never held the
-- grant: only the uses are charged.
if tostring(gen) == ARGV[7] then add(tonumber(ARGV[2]), -tonumber(ARGV[3]), -tonumber(ARGV[4])) end
for i = 8, #ARGV, 3 do
  add(tonumber(ARGV[i]), tonumber(ARGV[i+1]), tonumber(ARGV[i+2]))
end
save(ARGV[5])
return tonumber(gen)
`)

// slotsScript: a hash of node → "held:until" (Unix ms). ARGV node, want,
// limit, now, ttl ms (Lua numbers are doubles: ns would lose digits). Lapsed holdings are removed as they are met; the
// hash has one field per node, so the scan is the cluster's size.
var slotsScript = redis.NewScript(`
local k = KEYS[1]
local node, want, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now, ttl = tonumber(ARGV[4]), tonumber(ARGV[5])
local all = redis.call('HGETALL', k)
local others = 0
for i = 1, #all, 2 do
  local held, untl = string.match(all[i+1], '^(%d+):(%d+)$')
  if untl == nil or tonumber(untl) <= now then
    redis.call('HDEL', k, all[i])
  elseif all[i] ~= node then
    others = others + tonumber(held)
  end
end
local h = limit - others
if want < h then h = want end
if h < 0 then h = 0 end
redis.call('HSET', k, node, h .. ':' .. string.format('%d', now + ttl))
redis.call('PEXPIRE', k, ttl + 1000)
return h
`)

// demandScript: a hash of node → "until:report" (until in Unix ms). ARGV
// node, report, now (ms), ttl (ms). It sets node's report, removes the
// lapsed ones as it meets them, and returns node, report, node, report...
// for the live ones: the hash has one field per node.
var demandScript = redis.NewScript(`
local k = KEYS[1]
local node, rep = ARGV[1], ARGV[2]
local now, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('HSET', k, node, string.format('%d', now + ttl) .. ':' .. rep)
local all = redis.call('HGETALL', k)
local out = {}
for i = 1, #all, 2 do
  local v = all[i+1]
  local c = string.find(v, ':', 1, true)
  local untl = c and tonumber(string.sub(v, 1, c - 1))
  if untl == nil or untl <= now then
    redis.call('HDEL', k, all[i])
  else
    out[#out+1] = all[i]
    out[#out+1] = string.sub(v, c + 1)
  end
end
redis.call('PEXPIRE', k, ttl + 1000)
return out
`)

// RedisStore is the Store in Redis, through a redisconn.Conn (its budget
// per call and its breaker). Keys are Prefix+":lease:{"+key+"}".
type RedisStore struct {
	conn   *redisconn.Conn
	prefix string
}

// NewRedisStore returns a store on conn; prefix defaults to "ringgate".
func NewRedisStore(conn *redisconn.Conn, prefix string) *RedisStore {
	if prefix == "" {
		prefix = "ringgate"
	}
	return &RedisStore{conn: conn, prefix: prefix}
}

// Load loads the scripts (at start, and it is cheap to call again after a
// failover: Run falls back to EVAL on NOSCRIPT anyway).
func (s *RedisStore) Load(ctx context.Context) error {
	return s.conn.Call(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		for _, sc := range []*redis.Script{grantScript, returnScript, slotsScript, demandScript} {
			if err := sc.Load(ctx, s.conn.Client()).Err(); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *RedisStore) key(k string) string { return s.prefix + ":lease:{" + k + "}" }

func ms(d time.Duration) int64 { return max(1, d.Milliseconds()) }

func (s *RedisStore) Grant(ctx context.Context, key string, g GrantRequest) (GrantReply, error) {
	var vals []int64
	err := s.conn.CallKey(ctx, s.key(key), 0, func(ctx context.Context) (err error) {
		vals, err = grantScript.Run(ctx, s.conn.Client(), []string{s.key(key)},
			g.Now, g.Expires, g.Limit.Requests, g.Limit.Tokens, g.Want.Requests, g.Want.Tokens, ms(g.KeyTTL),
			g.Min.Requests, g.Min.Tokens, newGen(), fenceArg(g.Fence)).Int64Slice()
		return err
	})
	if err != nil {
		return GrantReply{}, fmt.Errorf("lease %s: %w", key, err)
	}
	if len(vals) != 7 {
		return GrantReply{}, fmt.Errorf("lease %s: script answered %d values", key, len(vals))
	}
	return GrantReply{Granted: Amount{vals[0], vals[1]}, Used: Amount{vals[2], vals[3]}, Oldest: vals[4], Gen: vals[5], Fenced: vals[6] == 1}, nil
}

func fenceArg(f bool) string {
	if f {
		return "1"
	}
	return "0"
}

func (s *RedisStore) Return(ctx context.Context, key string, r ReturnRequest) (int64, error) {
	args := make([]any, 0, 7+3*len(r.Used))
	args = append(args, r.Now, r.Expires, r.Granted.Requests, r.Granted.Tokens, ms(r.KeyTTL), newGen(), strconv.FormatInt(r.Gen, 10))
	for _, u := range r.Used {
		args = append(args, u.Bucket, u.Requests, u.Tokens)
	}
	var gen int64
	err := s.conn.CallKey(ctx, s.key(key), 0, func(ctx context.Context) (err error) {
		gen, err = returnScript.Run(ctx, s.conn.Client(), []string{s.key(key)}, args...).Int64()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("give back lease %s: %w", key, err)
	}
	return gen, nil
}

// newGen is a window generation: random, positive, exact in a Lua double.
func newGen() int64 { return 1 + rand.Int64N(1<<52) }

func (s *RedisStore) HoldSlots(ctx context.Context, key, node string, want, limit, now int64, ttl time.Duration) (int64, error) {
	var held int64
	err := s.conn.CallKey(ctx, s.key(key), 0, func(ctx context.Context) (err error) {
		held, err = slotsScript.Run(ctx, s.conn.Client(), []string{s.key(key) + ":slots"},
			node, want, limit, now/int64(time.Millisecond), ms(ttl)).Int64()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("hold slots %s: %w", key, err)
	}
	return held, nil
}

func (s *RedisStore) Demand(ctx context.Context, key, node string, report []byte, now int64, ttl time.Duration) (map[string][]byte, error) {
	var vals []any
	err := s.conn.CallKey(ctx, s.key(key), 0, func(ctx context.Context) (err error) {
		vals, err = demandScript.Run(ctx, s.conn.Client(), []string{s.key(key) + ":demand"},
			node, report, now/int64(time.Millisecond), ms(ttl)).Slice()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("demand %s: %w", key, err)
	}
	out := make(map[string][]byte, len(vals)/2)
	for i := 0; i+1 < len(vals); i += 2 {
		n, _ := vals[i].(string)
		r, _ := vals[i+1].(string)
		out[n] = []byte(r)
	}
	return out, nil
}
