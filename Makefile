# make test is the project's test command (README, .ci/run).
GO ?= go

# Tests start their own redis-server and haproxy on free loopback ports;
# Debian keeps haproxy in sbin, which a user's PATH may lack.
export PATH := $(PATH):/usr/sbin:/sbin

.PHONY: test deps short lint soak bench-report bench-ab check unit e2e fuzz bench report build static docker-smoke ui-screenshot cluster scale-up scale-down logs cluster-down

test: deps check unit e2e

# What the tests need on Debian (Redis, HAProxy, Node and the OpenAI SDK,
# Chromium), installed only when missing; sudo only then, when not root.
deps:
	.ci/deps

check:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags e2e ./...

# Unit, property and in-process cluster tests, with the race detector; fuzz
# targets run over their seed corpus.
unit:
	$(GO) test -race -count=1 -timeout 15m ./...

# Real processes: ringgate nodes behind HAProxy (TCP mode), with Redis.
e2e:
	@if [ -d e2e ]; then $(GO) test -race -count=1 -timeout 15m -tags e2e ./e2e/...; else echo "no e2e tests yet"; fi

# docs/ui.png: the status page under the browser test's load, a few
# tenants refused.
ui-screenshot:
	RINGGATE_UI_SCREENSHOT=docs/ui.png $(GO) test -count=1 -tags e2e -run TestUIInABrowser ./e2e/

# Each fuzz target for FUZZTIME (their seed corpora run with every make
# unit): request bodies of the four APIs, SSE usage, config, snapshots,
# handoff replies, gossip metadata, hop signatures, peers' deltas.
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run XXX -fuzz '^FuzzParseRequest$$' -fuzztime $(FUZZTIME) ./upstream/
	$(GO) test -run XXX -fuzz '^FuzzStreamFilter$$' -fuzztime $(FUZZTIME) ./upstream/
	$(GO) test -run XXX -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./config/
	$(GO) test -run XXX -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./snapshot/
	$(GO) test -run XXX -fuzz '^FuzzDecodeReplies$$' -fuzztime $(FUZZTIME) ./handoff/
	$(GO) test -run XXX -fuzz '^FuzzDecodeMeta$$' -fuzztime $(FUZZTIME) ./gossip/
	$(GO) test -run XXX -fuzz '^FuzzHopVerify$$' -fuzztime $(FUZZTIME) ./router/internal/hopsign/
	$(GO) test -run XXX -fuzz '^FuzzApplyDeltas$$' -fuzztime $(FUZZTIME) ./router/

bench:
	$(GO) test -run XXX -bench . -benchmem ./limiter/ ./reserve/ ./ring/ ./snapshot/
	$(GO) test -run XXX -bench 'DecisionVsRedis|Proxy|Hop|HandoffTake' -benchmem -benchtime 2000x ./node/
	$(GO) test -run XXX -bench Handler -benchtime 20000x ./router/
	$(GO) test -run XXX -bench 'ManyTenants' -benchtime 1x ./node/

# The end-to-end report tests alone, printed (make bench-report runs them
# too, for the README): latency and throughput against direct and the
# floor proxy, a hop's cost, and 100 000 tenants on 3 processes.
report:
	RINGGATE_BENCH_REPORT=1 $(GO) test -count=1 -run 'AddedLatencyReport|HopLatencyReport' -v ./node/
	RINGGATE_BENCH_REPORT=1 $(GO) test -count=1 -tags e2e -run ManyTenantsClusterReport -v ./e2e/

build:
	$(GO) build -o ringgate .

# The release binary: static (no libc, no cgo), reproducible paths, no
# symbol table; what the Dockerfile builds.
OUT ?= ringgate
static:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(OUT) .

# Build the image and check it as a node: a request answered, HEALTHCHECK
# healthy, user 65532, SIGTERM drained with exit 0. Needs a Docker daemon.
docker-smoke:
	deploy/docker/smoke.sh

# golangci-lint (.golangci.yml: errcheck, staticcheck, unused, bodyclose,
# govet, ineffassign); .ci/run installs the pinned version when missing.
GOLANGCI_LINT ?= golangci-lint
lint:
	$(GOLANGCI_LINT) run ./...

# The published comparison (docs/bench/report.md and its charts): ringgate,
# one Redis call per request, uncoordinated local limits, the floor and
# direct, on loopback; about 2 minutes.
bench-report:
	$(GO) run ./bench/report -out docs/bench -readme README.md

# A change to the request path judged against a revision (BASE, default
# HEAD): the saturation rounds of both builds alternated run by run, each
# against the floor, and their medians (bench/ab); about 40 s a rep.
BASE ?= HEAD
CLIENTS ?= 8
REPS ?= 4
bench-ab:
	$(GO) run ./bench/ab -base $(BASE) -clients $(CLIENTS) -reps $(REPS)

# A soak (not in make test): a loaded cluster for SOAK, goroutines and heap
# checked flat, no slot left held.
SOAK ?= 5m
soak:
	RINGGATE_SOAK=$(SOAK) $(GO) test -count=1 -run '^TestSoak$$' -timeout 30m -v ./node/

# The fast tier for everyday work: unit tests without the cluster ones.
short:
	$(GO) test -short -count=1 ./...

# A local cluster on loopback (deploy/local): Redis, the fake provider, 3
# nodes behind HAProxy in TCP mode on 127.0.0.1:8000, and the demo load.
# scale-up adds node-4, scale-down drains it, logs follows the rebalance
# and drain events, cluster-down stops everything.
cluster:
	deploy/local/cluster.sh up
scale-up:
	deploy/local/cluster.sh scale-up
scale-down:
	deploy/local/cluster.sh scale-down
logs:
	deploy/local/cluster.sh logs
cluster-down:
	deploy/local/cluster.sh down
