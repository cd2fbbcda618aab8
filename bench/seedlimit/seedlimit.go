// Package seedlimit is the seed article's rate limiter, the baseline ringgate
// is measured against: an atomic Lua sliding window in Redis (a sorted set
// of "cost:id" charges, trimmed and summed on every call), one Redis round
// trip per request. Benchmarks and the published report use it; nothing in
// ringgate does.
package seedlimit

import (
	"context"

	"github.com/redis/go-redis/v9"
)

var script = redis.NewScript(`
local key = KEYS[1]
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local max_limit = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local req_id = ARGV[5]
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local entries = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
local current_usage = 0
for i = 1, #entries, 2 do
  local raw_val = entries[i]
  local sep = string.find(raw_val, ":")
  if sep then
    current_usage = current_usage + (tonumber(string.sub(raw_val, 1, sep - 1)) or 0)
  end
end
if current_usage + cost <= max_limit then
  redis.call('ZADD', key, now, tostring(cost) .. ":" .. req_id)
  redis.call('PEXPIRE', key, window + 1000)
  return {1, max_limit - (current_usage + cost), 0}
end
return {0, max_limit - current_usage, 0}
`)

// Take charges cost to key's window of windowMs milliseconds ending at
// nowMs if the window holds at most limit with it, as one atomic call; id
// names the charge (unique in the window). It reports whether it did.
func Take(ctx context.Context, c redis.Scripter, key string, nowMs, windowMs, limit, cost int64, id string) (bool, error) {
	v, err := script.Run(ctx, c, []string{key}, nowMs, windowMs, limit, cost, id).Int64Slice()
	if err != nil {
		return false, err
	}
	return len(v) > 0 && v[0] == 1, nil
}
