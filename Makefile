# toolbus — see README.md. `make run` starts a demo; `make test` runs every test.
GO        ?= go
BIN       := bin
PKGS      := ./...
TEST_TIMEOUT ?= 10m

.PHONY: all build test unit lint vet fmt-check run bench fuzz conformance soak clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# Every test: static checks, the whole Go suite with the race detector, then
# the official MCP conformance suite through the gateway. scripts/npm-tools.sh
# installs Node.js 22, the suite and server-everything (which Go tests start)
# from npm on the first run, and scripts/nats-server.sh builds the NATS server
# of the distributed tests from the Go module proxy; both are offline after that.
test: lint
	./scripts/npm-tools.sh
	./scripts/nats-server.sh >/dev/null
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)
	@# Tests left out of -race builds (a race inside paho on reconnect), run plain:
	$(GO) test -count=1 -run 'TestExternalBrokerRestartUnderLoad' ./integration/
	$(GO) test -count=1 -run 'TestAgentResubscribesAfterReconnect' ./expertagent/
	./scripts/conformance.sh

# The suite without the race detector (faster while editing).
unit:
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

lint: vet fmt-check

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt -l lists:"; echo "$$out"; exit 1; fi

# A working demo: gateway + embedded broker + two expert agents
# (scripts/run-demo.sh). The first build compiles every dependency, a minute
# or more on a small machine: go build -v names each package as it goes.
run:
	@echo "make run: building $(BIN)/toolbus and $(BIN)/expert-agent (the first time, every package below: a minute or more)"
	@$(GO) build -v -o $(BIN)/ ./cmd/toolbus ./cmd/expert-agent
	@TOOLBUS_BIN_DIR=$(BIN) exec ./scripts/run-demo.sh

# The gateway beside the MCP servers a user would run instead, phase by phase
# (scripts/bench.sh, docs/benchmarks.md: BENCH_LONG=1, BENCH_PHASES,
# BENCH_MOSQUITTO=1, BENCH_DURATION, BENCH_ROUNDS, ...); under 5 minutes by
# default. With BENCH_LONG=1 or BENCH_MICRO=1, then the Go micro-benchmarks of
# the MQTT core and the hot-path pieces, and each server's handler in-process
# (bench.BenchmarkHandler; BENCHTIME=5s for steadier numbers).
BENCHTIME ?= 2s
bench:
	./scripts/bench.sh
	@if [ -n "$$BENCH_LONG$$BENCH_MICRO" ]; then \
		$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./broker/ ./contract/ ./requester/ ./expertagent/ ./acl/ ./store/ ./platformtools/ ./internal/jsonenc/; \
		$(GO) test -run '^$$' -bench BenchmarkHandler -benchmem -benchtime $(BENCHTIME) ./bench/; \
	fi

# The official MCP conformance suite at 2025-11-25 and 2026-07-28, through
# the gateway, the embedded broker and the fixture agent (cmd/conformance-agent),
# with conformance-proxy adding the token. The first run installs the pinned
# suite and Node.js 22 into .cache/conformance with npm; later runs are
# offline. checks.json per scenario and the logs land in results/conformance/.
# Fails on a scored failure that conformance/expected-failures.yaml does not list.
# Then (CONFORMANCE_BRIDGE=0 skips it) the suite against mark3labs/mcp-go's
# conformance server, directly and through the gateway and `expert-agent
# bridge`, scores printed side by side; fails on a scenario that passes
# directly but not through the bridge, unless it is the upstream's own flake
# or conformance/expected-failures-bridge.yaml lists it.
conformance:
	./scripts/conformance.sh

# Fuzz each target for FUZZTIME; crashers land in testdata/fuzz and become
# regression cases that `make test` runs.
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzServeMCP$$' -fuzztime $(FUZZTIME) ./gateway/
	$(GO) test -run '^$$' -fuzz '^FuzzJSONGuards$$' -fuzztime $(FUZZTIME) ./gateway/
	$(GO) test -run '^$$' -fuzz '^FuzzValidateLevel$$' -fuzztime $(FUZZTIME) ./contract/
	$(GO) test -run '^$$' -fuzz '^FuzzPolicyAllow$$' -fuzztime $(FUZZTIME) ./acl/
	$(GO) test -run '^$$' -fuzz '^FuzzParseSecret$$' -fuzztime $(FUZZTIME) ./store/
	$(GO) test -run '^$$' -fuzz '^FuzzCallArguments$$' -fuzztime $(FUZZTIME) ./platformtools/
	$(GO) test -run '^$$' -fuzz '^FuzzFlatSchema$$' -fuzztime $(FUZZTIME) ./platformtools/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEnvelope$$' -fuzztime $(FUZZTIME) ./contract/
	$(GO) test -run '^$$' -fuzz '^FuzzParseTopic$$' -fuzztime $(FUZZTIME) ./contract/
	$(GO) test -run '^$$' -fuzz '^FuzzHeldBy$$' -fuzztime $(FUZZTIME) ./contract/
	$(GO) test -run '^$$' -fuzz '^FuzzFastDecode$$' -fuzztime $(FUZZTIME) ./contract/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./contract/
	$(GO) test -run '^$$' -fuzz '^FuzzAgentEncode$$' -fuzztime $(FUZZTIME) ./expertagent/
	$(GO) test -run '^$$' -fuzz '^FuzzAgentDecodeParams$$' -fuzztime $(FUZZTIME) ./expertagent/
	$(GO) test -run '^$$' -fuzz '^FuzzAgentHasKeys$$' -fuzztime $(FUZZTIME) ./expertagent/
	$(GO) test -run '^$$' -fuzz '^FuzzAppendString$$' -fuzztime $(FUZZTIME) ./internal/jsonenc/
	$(GO) test -run '^$$' -fuzz '^FuzzRedirectAllowed$$' -fuzztime $(FUZZTIME) ./oauth/
	$(GO) test -run '^$$' -fuzz '^FuzzUserID$$' -fuzztime $(FUZZTIME) ./oauth/

# The soak (integration/soak_test.go): SOAK_MINUTES of platform and agent
# calls across churning MCP sessions, the subscription LRU at its bound, the
# expert agent restarted every minute. Report in results/soak/. `make test`
# runs its 30-second version (TestSoak without SOAK_MINUTES).
SOAK_MINUTES ?= 10
SOAK_TIMEOUT ?= $(shell awk 'BEGIN { print $(SOAK_MINUTES) + 15 }')m
soak:
	SOAK_MINUTES=$(SOAK_MINUTES) $(GO) test -count=1 -v -run '^TestSoak$$' -timeout $(SOAK_TIMEOUT) ./integration/

clean:
	rm -rf $(BIN)
