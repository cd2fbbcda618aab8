#!/usr/bin/env bash
# A ringgate cluster on loopback, to watch it scale (make cluster, make
# scale-up, make scale-down, make logs, make cluster-down):
#
#   Redis            127.0.0.1:6390 (if redis-server is installed; else none)
#   fake provider    127.0.0.1:9000
#   node-1..3        HTTP 127.0.0.1:8081-8083, gossip 127.0.0.1:7951-7953
#   node-4           (scale-up) HTTP 127.0.0.1:8084, gossip 127.0.0.1:7954
#   HAProxy (L4)     127.0.0.1:8000, stats http://127.0.0.1:8404/stats
#   the demo load    ringgate load: 2 tenants at twice their limits
#
# Everything runs from one built binary; state (PIDs, logs, configs) is in
# deploy/local/run/. Every process is stopped by its PID (cluster-down).
set -euo pipefail
cd "$(dirname "$0")"
here=$PWD
run=$here/run
bin=$run/ringgate
root=$(cd ../.. && pwd)
export PATH="$PATH:/usr/sbin:/sbin"

pidfile() { echo "$run/$1.pid"; }
alive() { [ -f "$(pidfile "$1")" ] && kill -0 "$(cat "$(pidfile "$1")")" 2>/dev/null; }
start() { # name, then the command
  local name=$1; shift
  if alive "$name"; then echo "$name already runs (pid $(cat "$(pidfile "$name")"))"; return; fi
  "$@" >"$run/$name.log" 2>&1 &
  echo $! >"$(pidfile "$name")"
  echo "started $name (pid $!), log $run/$name.log"
}
stop() { # name: SIGTERM (a node drains), SIGKILL after 40 s
  local name=$1
  alive "$name" || { rm -f "$(pidfile "$name")"; return 0; }
  local pid; pid=$(cat "$(pidfile "$name")")
  kill -TERM "$pid" 2>/dev/null || true # it may have exited since
  for _ in $(seq 400); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
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
  start load "$bin" load -url http://127.0.0.1:8000 -keys sk-acme-1,sk-globex-1 -rate 20 -duration 1h
  echo
  echo "ringgate runs on http://127.0.0.1:8000 (HAProxy, TCP mode) in front of node-1..3."
  echo "  make logs        follow the rebalance, handoff and drain events"
  echo "  make scale-up    add node-4; make scale-down drains it"
  echo "  tail -f $run/load.log   what the load gets, a line a second"
  echo "  make cluster-down"
  ;;
scale-up)
  [ -f "$run/redis" ] && REDIS_ADDR=$(cat "$run/redis") && export REDIS_ADDR
  start_node 4
  echo "node-4 joined: its share of the tenants moves to it (make logs)"
  ;;
scale-down)
  stop node-4
  echo "node-4 drained: its tenants went back to node-1..3"
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
