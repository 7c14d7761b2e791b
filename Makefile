# toolbus — see README.md. `make run` starts a demo; `make test` runs every test.
GO        ?= go
BIN       := bin
PKGS      := ./...
TEST_TIMEOUT ?= 10m

.PHONY: all build test unit lint vet fmt-check run bench clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# Every test: static checks, then the whole suite with the race detector.
test: lint
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

# The suite without the race detector (faster while editing).
unit:
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

lint: vet fmt-check

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt -l lists:"; echo "$$out"; exit 1; fi

# A working demo: gateway + embedded broker + reference expert agent.
run: build
	./scripts/run-demo.sh

# Benchmarks of the MQTT core (numbers for the closing notes); BENCHTIME=5s for steadier numbers.
BENCHTIME ?= 2s
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./broker/ ./expertagent/ ./acl/

clean:
	rm -rf $(BIN)
