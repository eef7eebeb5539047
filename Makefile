# Fleet — build, test and demo. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/fleetmq/fleet/schema.Version=$(VERSION)
# grpcnotrace: gRPC (the agent's containerd client) then leaves out
# golang.org/x/net/trace, whose html/template stops the linker from dropping
# unused methods; the agent is 3.9 MB smaller (arm/FOOTPRINT.md).
GOFLAGS_BUILD := -trimpath -tags grpcnotrace -ldflags '$(LDFLAGS)'
BIN := bin
TEST_TIMEOUT ?= 18m

.PHONY: help build test test-short lint bench bench-quick demo demo-down arm clean

help: ## show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build fleet, fleet-hub and fleet-agent into ./bin (static, like the ARM release builds)
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $(BIN)/ ./cmd/fleet ./cmd/fleet-hub ./cmd/fleet-agent

lint: ## gofmt, go vet and go mod tidy checks
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@cp go.mod /tmp/fleet-go.mod.bak; cp go.sum /tmp/fleet-go.sum.bak; $(GO) mod tidy; \
	  if ! diff -q go.mod /tmp/fleet-go.mod.bak >/dev/null || ! diff -q go.sum /tmp/fleet-go.sum.bak >/dev/null; then \
	    cp /tmp/fleet-go.mod.bak go.mod; cp /tmp/fleet-go.sum.bak go.sum; echo "go mod tidy would change go.mod/go.sum"; exit 1; fi

test: lint ## run every test with -race (containerd tests need root and containerd+runc)
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

test-short: ## unit tests only
	$(GO) test -race -short -count=1 ./...

SCALE ?= $(GO) run ./test/scale

bench-quick: ## scale suite, 1,000 hollow agents, embedded broker (< 3 min); table into BENCHMARKS.md
	$(SCALE) -agents 1000 -broker embedded -runtime-latency 65ms -markdown BENCHMARKS.md

bench: ## Go benchmarks, then the scale suite at 1,000 and 10,000 agents, embedded and Mosquitto, and B4 with agents reconnecting at once; tables into BENCHMARKS.md
	$(GO) test -run '^$$' -bench . -benchtime 200x ./schema/ ./hub/... ./edgeagent/
	@status=0; for n in 1000 10000; do for b in embedded mosquitto; do \
	  $(SCALE) -agents $$n -broker $$b -runtime-latency 65ms -markdown BENCHMARKS.md || status=1; \
	done; done; \
	$(SCALE) -agents 10000 -broker embedded -runtime-latency 65ms -phases storm -reconnect-at-once -markdown BENCHMARKS.md || status=1; \
	exit $$status

demo: ## start a local fleet (root): containerd, a hub, three agents; see README
	@bash test/demo/demo.sh up

demo-down: ## stop everything `make demo` started
	@bash test/demo/demo.sh down

arm: ## cross-build fleet-agent and fleet for arm64, armv7, armv6 into dist/ with SHA256SUMS
	@VERSION=$(VERSION) bash arm/build.sh

clean: ## remove build output
	rm -rf $(BIN) dist
