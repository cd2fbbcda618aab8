#!/usr/bin/env bash
# make docker-smoke: build the image, run it as a node in front of the fake
# provider (the image's own `fake-upstream`), and check what the Dockerfile
# promises: a request answered, the HEALTHCHECK healthy, a non-root user,
# SIGTERM drained with exit 0. Needs a Docker daemon and the golang:1.26
# base image (pulled, or already there). Host network, loopback only.
set -euo pipefail

IMAGE=${IMAGE:-ringgate:smoke}
HTTP_PORT=${HTTP_PORT:-18080}
GOSSIP_PORT=${GOSSIP_PORT:-17946}
UP_PORT=${UP_PORT:-19000}
cd "$(dirname "$0")/../.."

fail() { echo "docker-smoke: FAIL: $*" >&2; exit 1; }
cleanup() {
	docker rm -f rg-smoke-node rg-smoke-up >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
tmp=$(mktemp -d)
trap cleanup EXIT

docker info >/dev/null 2>&1 || fail "no Docker daemon"
start=$(date +%s)
docker build -q -t "$IMAGE" . >/dev/null
echo "docker-smoke: built $IMAGE in $(( $(date +%s) - start )) s," \
	"$(docker image inspect "$IMAGE" --format '{{.Size}}' | awk '{printf "%.1f MB", $1/1e6}')"

sed "s#http://127.0.0.1:9000#http://127.0.0.1:${UP_PORT}#" deploy/docker/config.toml >"$tmp/config.toml"
chmod 0644 "$tmp/config.toml"

docker run -d --name rg-smoke-up --network=host --entrypoint /ringgate "$IMAGE" \
	fake-upstream -listen "127.0.0.1:${UP_PORT}" >/dev/null
docker run -d --name rg-smoke-node --network=host \
	-v "$tmp/config.toml:/etc/ringgate/config.toml:ro" \
	-e RINGGATE_SECRET="$(head -c 32 /dev/urandom | base64)" \
	-e RINGGATE_LISTEN="127.0.0.1:${HTTP_PORT}" \
	-e RINGGATE_GOSSIP="127.0.0.1:${GOSSIP_PORT}" \
	"$IMAGE" >/dev/null

user=$(docker inspect rg-smoke-node --format '{{.Config.User}}')
[ "$user" = "65532:65532" ] || fail "runs as user '$user', want 65532:65532"

# The HEALTHCHECK's first run is after its interval (10 s).
health=""
for _ in $(seq 60); do
	health=$(docker inspect rg-smoke-node --format '{{.State.Health.Status}}')
	[ "$health" = healthy ] && break
	[ "$health" = unhealthy ] && break
	sleep 0.5
done
[ "$health" = healthy ] || { docker logs rg-smoke-node | tail -20; fail "health '$health' after 30 s"; }

code=$(curl -s -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' \
	"http://127.0.0.1:${HTTP_PORT}/v1/chat/completions" \
	-H 'Authorization: Bearer sk-acme-1' \
	-d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}')
[ "$code" = 200 ] || { cat "$tmp/body"; fail "request answered $code"; }
grep -qi '^x-ratelimit-remaining-requests:' "$tmp/headers" || fail "no x-ratelimit headers"

docker stop -t 40 rg-smoke-node >/dev/null
exit_code=$(docker inspect rg-smoke-node --format '{{.State.ExitCode}}')
[ "$exit_code" = 0 ] || fail "exit code $exit_code after SIGTERM"
docker logs rg-smoke-node 2>&1 | grep -q '"msg":"drain".*"phase":"done","clean":true' ||
	fail "no clean drain in the logs"

echo "docker-smoke: ok (user $user, healthy, 200 with rate headers, SIGTERM drained, exit 0)"
