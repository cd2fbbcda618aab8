#!/usr/bin/env bash
# A ringgate cluster on loopback, to watch it scale (make cluster, make
# scale-up, make scale-down, make logs, make cluster-down):
#
#   Redis            127.0.0.1:6390 (if redis-server is installed; else none)
#   fake provider    127.0.0.1:9000
#   node-1..3        HTTP 127.0.0.1:8081-8083, gossip 127.0.0.1:7951-7953
#   node-4           (scale-up) HTTP 127.0.0.1:8084, gossip 127.0.0.1:7954
#   HAProxy (L4)     127.0.0.1:8000, stats http://127.0.0.1:8404/stats
#   the demo load    ringgate load: the 12 tenants of node.toml at twice their limits
#
# Everything runs from one built binary; state (PIDs, logs, configs) is in
# deploy/local/run/. Every process is stopped by its PID (cluster-down).
#
# Timeouts, derived from node.toml (go test ./deploy/ checks them):
#   kill_after    a stopped node drains for up to node.drain_timeout (10 s),
#                 then leaves the gossip, gives its leases back and closes
#                 (a few seconds more); it is killed only after kill_after.
#   load_timeout  the load's requests are interactive and read whole: held
#                 at most queue.interactive_wait (2 s) plus the upstream's
#                 timeout (10 s), plus the 5 s a forwarding node allows on
#                 top; the load gives up on one only after load_timeout.
#   HAProxy       deploy/haproxy/haproxy.cfg, whose comment says how.
set -euo pipefail
cd "$(dirname "$0")"
here=$PWD
run=$here/run
bin=$run/ringgate
root=$(cd ../.. && pwd)
export PATH="$PATH:/usr/sbin:/sbin"
kill_after=20   # seconds; more than node.toml's drain_timeout and the leaving after it
load_timeout=20s # more than queue.interactive_wait + the upstream's timeout + 5 s
window=10s      # node.toml's limits.window: the load sums each tenant's 200s per window

pidfile() { echo "$run/$1.pid"; }
alive() { [ -f "$(pidfile "$1")" ] && kill -0 "$(cat "$(pidfile "$1")")" 2>/dev/null; }
start() { # name, then the command
  local name=$1; shift
  if alive "$name"; then echo "$name already runs (pid $(cat "$(pidfile "$name")"))"; return; fi
  "$@" >"$run/$name.log" 2>&1 &
  echo $! >"$(pidfile "$name")"
  echo "started $name (pid $!), log $run/$name.log"
}
stop() { # name: SIGTERM (a node drains), SIGKILL after kill_after seconds
  local name=$1
  alive "$name" || { rm -f "$(pidfile "$name")"; return 0; }
  local pid; pid=$(cat "$(pidfile "$name")")
  kill -TERM "$pid" 2>/dev/null || true # it may have exited since
  for _ in $(seq $((kill_after * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  rm -f "$(pidfile "$name")"
  echo "stopped $name (pid $pid)"
}
wait_http() { # url: until it answers 200, at most 10 s
  for _ in $(seq 100); do
    curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "no answer from $1" >&2; return 1
}

node_config() { # n: node-n's config
  local n=$1 join="" redis=""
  [ "$n" != 1 ] && join='"127.0.0.1:7951"'
  [ -n "${REDIS_ADDR:-}" ] && redis=$REDIS_ADDR
  sed -e "s/@NAME@/node-$n/" -e "s/@HTTP@/127.0.0.1:808$n/" -e "s/@GOSSIP@/127.0.0.1:795$n/" \
      -e "s/@JOIN@/$join/" -e "s/@REDIS@/$redis/" "$here/node.toml" >"$run/node-$n.toml"
}
start_node() { # n
  node_config "$1"
  RINGGATE_SECRET=$(cat "$run/secret") start "node-$1" "$bin" -config "$run/node-$1.toml"
  wait_http "http://127.0.0.1:808$1/healthz"
}

# The rebalance events: every node logs one per ring change ("msg":"rebalance",
# node/node.go): the ring's members, how many tenants moved and which, how
# many this node handed over and took over, and how the state of those it
# took over arrived (peer: from the previous owner, redis: its snapshot,
# conservative: neither).
json_field() { # key, line: the key's value (a number, a list or an object)
  { printf '%s\n' "$2" | grep -o "\"$1\":\(\[[^]]*\]\|{[^}]*}\|[^,}]*\)" || true; } | head -n 1 | cut -d: -f2- | tr -d '"'
}
marks() { # where each node's log ends now
  for n in 1 2 3 4; do
    if [ -f "$run/node-$n.log" ]; then wc -l <"$run/node-$n.log"; else echo 0; fi
  done >"$run/marks"
}
events() { # n, msg: node-n's log lines of that event since marks
  local from; from=$(sed -n "${1}p" "$run/marks" 2>/dev/null || true)
  [ -f "$run/node-$1.log" ] || return 0
  tail -n +$((${from:-0} + 1)) "$run/node-$1.log" | { grep "\"msg\":\"$2\"" || true; }
}
await_rebalance() { # want (with|without node-4), nodes...: each logged a ring that way, at most 15 s
  local want=$1; shift
  for _ in $(seq 150); do
    local all=1
    for n in "$@"; do
      local last; last=$(events "$n" rebalance | tail -n 1)
      case "$want:$(json_field members "$last")" in
        with:*node-4*) ;;
        without:\[*) case "$last" in *node-4*) all=0 ;; esac ;;
        *) all=0 ;;
      esac
    done
    [ "$all" = 1 ] && return 0
    sleep 0.1
  done
  echo "(not every node logged the new ring within 15 s: make logs)" >&2
}
report_rebalance() { # nodes...: their rebalance events since marks, in plain words
  local l n first=""
  for n in 1 2 3; do # node-4's first ring is its first: every tenant "moved" to it
    l=$(events "$n" rebalance | tail -n 1)
    [ -n "$l" ] && { first=$l; break; }
  done
  echo "The ring is now $(json_field members "$first" | tr -d '[]'):" \
    "$(json_field moved "$first") of $(grep -c '^\[\[tenants\]\]' "$here/node.toml") tenants moved" \
    "($(json_field moved_tenants "$first" | tr -d '[]' | sed 's/,/, /g'))."
  for n in "$@"; do
    events "$n" rebalance | while IFS= read -r l; do
      local out="" over took state
      over=$(json_field handed_over "$l") took=$(json_field taken_over "$l")
      if [ "$over" != 0 ]; then out="handed over $over"; fi
      if [ "$took" != 0 ]; then
        state=$(json_field state "$l" | tr -d '{}' | tr ',' '\n' | { grep -v ':0$' || true; } | tr ':' ' ' | paste -sd, - | sed 's/,/, /g')
        out="${out:+$out, }took over $took, their state from: $state (in $(json_field handoff_ms "$l") ms)"
      fi
      echo "  node-$n ${out:-kept its tenants}"
    done
  done
  echo "  (state from peer: the previous owner handed the tenant's windows over; redis_snapshot:"
  echo "  from its last snapshot; conservative: neither, a cautious budget until the window passes)"
}

case "${1:-}" in
up)
  mkdir -p "$run"
  (cd "$root" && go build -o "$bin" .)
  [ -f "$run/secret" ] || head -c 32 /dev/urandom | base64 >"$run/secret"
  if command -v redis-server >/dev/null; then
    start redis redis-server --port 6390 --bind 127.0.0.1 --save "" --appendonly no
    export REDIS_ADDR=127.0.0.1:6390
    echo "$REDIS_ADDR" >"$run/redis"
  else
    echo "no redis-server: the cluster runs without Redis (handoffs peer to peer)"
  fi
  start fake "$bin" fake-upstream -listen 127.0.0.1:9000 -latency 20ms
  wait_http http://127.0.0.1:9000/_records
  for n in 1 2 3; do start_node "$n"; done
  start haproxy haproxy -f "$here/../haproxy/haproxy.cfg" -db
  wait_http http://127.0.0.1:8404/stats
  wait_http http://127.0.0.1:8000/readyz
  # One key per tenant of node.toml, each sent 10 requests a second.
  keys=$(grep -o '"sk-[a-z-]*-1"' "$here/node.toml" | tr -d '"' | paste -sd, -)
  start load "$bin" load -url http://127.0.0.1:8000 -keys "$keys" -rate 10 -window "$window" \
    -timeout "$load_timeout" -duration 1h
  echo
  echo "ringgate runs on http://127.0.0.1:8000 (HAProxy, TCP mode) in front of node-1..3."
  echo "  make logs        follow the rebalance, handoff and drain events"
  echo "  make scale-up    add node-4; make scale-down drains it"
  echo "  tail -f $run/load.log   what the load gets: a legend, a line a second, each tenant per window"
  echo "  make cluster-down"
  ;;
scale-up)
  [ -f "$run/redis" ] && REDIS_ADDR=$(cat "$run/redis") && export REDIS_ADDR
  marks
  start_node 4
  await_rebalance with 1 2 3 4
  echo "node-4 joined. What each node logged (\"msg\":\"rebalance\", make logs shows them all):"
  report_rebalance 1 2 3 4
  echo "In load.log's next window block the moved tenants show \"node-N -> node-4\", and their 200s"
  echo "in that window stay at their limit of 50: their windows moved with them."
  ;;
scale-down)
  marks
  stop node-4
  await_rebalance without 1 2 3
  echo "node-4 drained and left. What each node logged (\"msg\":\"rebalance\", make logs shows them all):"
  report_rebalance 4 1 2 3
  events 4 drain | { grep -o '"phase":"[a-z_]*"[^}]*' || true; } | tr -d '"' | tr ':' ' ' |
    sed 's/,/, /g; s/^phase /  node-4 drain: /'
  echo "Its tenants went back to node-1..3 with their windows; load.log's window blocks show their node change."
  ;;
logs)
  tail -n +1 -F "$run"/node-1.log "$run"/node-2.log "$run"/node-3.log "$run"/node-4.log 2>/dev/null | grep --line-buffered -E '"msg":"(rebalance|handoff|drain|fallback|spillover|reload)"'
  ;;
down)
  for name in load haproxy node-4 node-3 node-2 node-1 fake redis; do stop "$name"; done
  ;;
*)
  echo "usage: $0 up|scale-up|scale-down|logs|down" >&2
  exit 2
  ;;
esac
