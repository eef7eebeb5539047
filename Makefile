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
TEST_TIMEOUT ?= 30m

.PHONY: help build deps test test-short fuzz lint bench bench-quick bench-failover bench-agent demo demo-down arm clean

help: ## show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build fleet, fleet-hub and fleet-agent into ./bin (static, like the ARM release builds)
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $(BIN)/ ./cmd/fleet ./cmd/fleet-hub ./cmd/fleet-agent

lint: ## gofmt, go vet and go mod tidy checks (changes no file)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod/go.sum are not tidy; run 'go mod tidy':"; $(GO) mod tidy -diff; exit 1; }

deps: ## install the system packages the tests need (apt-get, as root or with sudo), or print the one line that would
	@$(GO) run ./test/sysdeps/install

# Root runs the containerd tests, and must: a missing containerd fails them.
# So does CI (CI set), root or not: a runner that cannot run them (no root,
# no containerd) fails instead of skipping every containerd and e2e suite
# and passing green. In CI the test image cache starts empty, so no image
# left by an earlier run can hide a broken build path.
TEST_ENV := $(if $(or $(filter 0,$(shell id -u)),$(CI)),FLEET_REQUIRE_CONTAINERD=1)
TEST_ENV += $(if $(CI),FLEET_TESTIMAGE_CACHE=$$(mktemp -d))

test: deps lint ## every test with -race, then every fuzz target for 2s; installs what the tests need first (see deps)
	$(TEST_ENV) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	$(GO) run ./test/fuzz -fuzztime 2s

# -race needs cgo and a C compiler; test-short needs only Go, so it drops
# -race where there is none.
RACE := $(shell [ "$$($(GO) env CGO_ENABLED)" = 1 ] && command -v "$$($(GO) env CC)" >/dev/null 2>&1 && echo -race)

test-short: ## unit tests only: needs nothing but Go (tests of system tools and qemu skip)
	@[ -n "$(RACE)" ] || echo "test-short: no C compiler, running without -race (make test installs gcc)"
	$(GO) test $(RACE) -short -count=1 ./...

FUZZTIME ?= 60s

fuzz: ## every fuzz target for FUZZTIME (default 60s) each; a failing input lands in testdata/fuzz/ as a regression test
	$(GO) run ./test/fuzz -fuzztime $(FUZZTIME) -minimizetime 10s

SCALE ?= $(GO) run ./test/scale

# The bytes phase idles for 10 minutes: bench runs it once, at 1,000 agents.
NOBYTES := -phases floor,converge,hub-memory,single-change,storm,rollout

bench-quick: ## scale suite, 1,000 hollow agents, embedded broker (< 3 min, without the 10-minute bytes phase); table into BENCHMARKS.md
	$(SCALE) -agents 1000 -broker embedded -runtime-latency 65ms $(NOBYTES) -markdown BENCHMARKS.md

# make bench's scale runs keep their JSON in BENCH_DIR (the previous
# run's moves to BENCH_DIR.prev), and the headline table is made from it
# (go run ./test/scale summary: issue 45's figures, before, now, target,
# met, steal). The sizes are issue 45's; smaller ones test the plumbing
# without BENCHMARKS.md: make bench-scale BENCH_SMALL=20 BENCH_LARGE=40
# BENCH_HUGE=60 BENCH_SITES=2 BENCH_MARKDOWN= BENCH_AGENT=no
# BENCH_SCALE_FLAGS='-changes 20 -idle-window 10s -flood-window 5s'.
# BENCH_HUGE= leaves the bridged run out. The real agent's figures come
# from make bench-agent (when the Makefile has it) as BENCH_DIR/agent.json
# (fields: AgentFigures in test/scale/summary.go); without it they print
# "not measured".
BENCH_DIR ?= dist/bench
BENCH_SMALL ?= 1000
BENCH_LARGE ?= 10000
BENCH_HUGE ?= 100000
BENCH_SITES ?= 8
BENCH_SCALE_FLAGS ?=
BENCH_MARKDOWN ?= BENCHMARKS.md
BENCH_AGENT ?= yes
BENCH_MD := $(if $(BENCH_MARKDOWN),-markdown $(BENCH_MARKDOWN))
BENCH_SIZES := -small $(BENCH_SMALL) -large $(BENCH_LARGE) $(if $(BENCH_HUGE),-huge $(BENCH_HUGE))

bench: ## Go benchmarks, then bench-scale: the scale suite's runs and issue 45's headline table
	$(GO) test -run '^$$' -bench . -benchtime 200x ./schema/ ./hub/... ./edgeagent/
	@$(MAKE) --no-print-directory bench-scale

.PHONY: bench-scale bench-summary
bench-scale: ## the scale suite at 1,000 and 10,000 agents (embedded with the flood phase, Mosquitto), the idle bytes (10 min), B4 at once, 100,000 bridged, the real agent; tables into BENCHMARKS.md, JSON into dist/bench, then the headline
	@rm -rf $(BENCH_DIR).prev; if [ -d $(BENCH_DIR) ]; then mv $(BENCH_DIR) $(BENCH_DIR).prev; fi; mkdir -p $(BENCH_DIR)
	@# A failed run marks BENCH_DIR/FAILED and the others still run: the
	@# headline says "not measured" or "failed" for what it lacks.
	@for n in $(BENCH_SMALL) $(BENCH_LARGE); do for b in embedded mosquitto; do \
	  phases=$(subst -phases ,,$(NOBYTES)); if [ $$b = embedded ]; then phases=$$phases,flood; fi; \
	  $(SCALE) -agents $$n -broker $$b -runtime-latency 65ms -phases $$phases $(BENCH_MD) -json-file $(BENCH_DIR)/$$b-$$n.json $(BENCH_SCALE_FLAGS) || touch $(BENCH_DIR)/FAILED; \
	done; done
	@$(SCALE) -agents $(BENCH_SMALL) -broker embedded -runtime-latency 65ms -phases converge,bytes $(BENCH_MD) -json-file $(BENCH_DIR)/bytes-$(BENCH_SMALL).json $(BENCH_SCALE_FLAGS) || touch $(BENCH_DIR)/FAILED
	@$(SCALE) -agents $(BENCH_LARGE) -broker embedded -runtime-latency 65ms -phases storm -reconnect-at-once $(BENCH_MD) -json-file $(BENCH_DIR)/storm-at-once-$(BENCH_LARGE).json $(BENCH_SCALE_FLAGS) || touch $(BENCH_DIR)/FAILED
	@# 100,000 devices: the section "100,000 devices simulated (issue 45)"
	@# of BENCHMARKS.md; its figures go to the headline only.
	@if [ -n "$(BENCH_HUGE)" ]; then \
	  $(SCALE) -agents $(BENCH_HUGE) -topology bridged -sites $(BENCH_SITES) -agent-kind lite -runtime-latency 65ms \
	    -phases converge,hub-memory,single-change,bytes,uplink,storm -changes 300 -idle-window 5m \
	    -json-file $(BENCH_DIR)/bridged-$(BENCH_HUGE).json $(BENCH_SCALE_FLAGS) || touch $(BENCH_DIR)/FAILED; \
	fi
	@if [ "$(BENCH_AGENT)" != yes ]; then :; \
	elif grep -q '^bench-agent:' $(firstword $(MAKEFILE_LIST)); then \
	  $(MAKE) --no-print-directory bench-agent BENCH_AGENT_JSON=$(abspath $(BENCH_DIR))/agent.json || touch $(BENCH_DIR)/FAILED; \
	else echo "make bench: no bench-agent target, the real agent's figures are not measured"; fi
	@$(MAKE) --no-print-directory bench-summary
	@if [ -e $(BENCH_DIR)/FAILED ]; then echo "make bench: a run failed (above); the headline says which figures it lacks"; exit 1; fi

bench-summary: ## issue 45's headline table from the JSON in dist/bench (make bench writes it), also into BENCHMARKS.md's "Headline (issue 45)"
	@$(SCALE) summary -dir $(BENCH_DIR) $(BENCH_SIZES) $(BENCH_MD)

bench-failover: ## kill -9 of the leader hub 20 times (3 etcd members, 2 hubs): new-leader time p50/max in the log (BENCHMARKS.md)
	FLEET_REQUIRE_CONTAINERD=1 FLEET_FAILOVER_KILLS=20 $(GO) test -race -count=1 -timeout 20m -run '^TestE2EHubFailover$$' -v ./test/ | grep -E 'kill [0-9]+ of|failover over|^(ok|FAIL|---)'

# BenchmarkAgent runs once (-benchtime 1x) and prints its own table; the
# agent it measures is built as released (no -race), whatever the flags.
BENCH_AGENT_IDLE ?= 5m
BENCH_AGENT_CHANGES ?= 20

bench-agent: ## the real agent on the private containerd, three pods, no -race: idle CPU/hour (BENCH_AGENT_IDLE window), CPU per pod replaced, VmRSS/RssAnon/RssFile/Pss, steal (root; ~10 min)
	FLEET_REQUIRE_CONTAINERD=1 FLEET_BENCH_AGENT_JSON=$(BENCH_AGENT_JSON) FLEET_BENCH_AGENT_IDLE=$(BENCH_AGENT_IDLE) FLEET_BENCH_AGENT_CHANGES=$(BENCH_AGENT_CHANGES) \
	  $(GO) test -count=1 -timeout 30m -run '^$$' -bench '^BenchmarkAgent$$' -benchtime 1x ./test/

demo: ## start a local fleet (root): containerd, a hub, three agents; prints the dashboard URL and a read-only token; see README
	@bash test/demo/demo.sh up

demo-down: ## stop everything `make demo` started
	@bash test/demo/demo.sh down

arm: ## cross-build fleet-agent and fleet for arm64, armv7, armv6 into dist/ with SHA256SUMS
	@VERSION=$(VERSION) bash arm/build.sh

AGENT_IMAGE_ARCHES ?= amd64 arm64 armv7 armv6
.PHONY: agent-image
agent-image: ## `make arm` (plus amd64), then the multi-arch agent image: pushed to AGENT_IMAGE=registry/repo:tag, else dist/fleet-agent-image.tar
	@ARCHES="$(AGENT_IMAGE_ARCHES)" $(MAKE) --no-print-directory arm
	@$(GO) run ./arm/agentimage $(if $(AGENT_IMAGE),--push $(AGENT_IMAGE),-o dist/fleet-agent-image.tar) $(AGENT_IMAGE_FLAGS)

.PHONY: uplot
uplot: ## fetch uPlot (UPLOT_VERSION, default 1.6.32) with npm into the dashboard's embedded assets; by hand only, never in CI
	@sh hub/dashboard/vendor-uplot.sh

clean: ## remove build output
	rm -rf $(BIN) dist
