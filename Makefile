# make test is the project's test command (README, .ci/run).
GO ?= go

.PHONY: test check unit e2e fuzz bench build

test: check unit e2e

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

fuzz:
	$(GO) test -run XXX -fuzz FuzzParseRequest -fuzztime 30s ./upstream/
	$(GO) test -run XXX -fuzz FuzzParse -fuzztime 30s ./config/
	$(GO) test -run XXX -fuzz FuzzDecode -fuzztime 30s ./snapshot/

bench:
	$(GO) test -run XXX -bench . -benchmem ./limiter/ ./reserve/ ./ring/ ./snapshot/
	$(GO) test -run XXX -bench . -benchmem -benchtime 2000x ./node/

build:
	$(GO) build -o ringgate .
