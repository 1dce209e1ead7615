# redis-ctr: `make run` builds the module and starts redis-server with it (foreground,
# PORT=6379); `make test` runs every test. Both install what is missing first.

PORT ?= 6379
MODULE := target/release/libredis_ctr.so
DATA_DIR := data
CARGO ?= cargo
export CTR_MODULE := $(CURDIR)/$(MODULE)

.PHONY: all deps build run test unit integration lint bench clean

all: build

deps:
	@bash .ci/install-deps

build: deps
	$(CARGO) build --release

run: build
	@mkdir -p $(DATA_DIR)
	redis-server --port $(PORT) --dir $(CURDIR)/$(DATA_DIR) --loadmodule $(CURDIR)/$(MODULE) $(MODULE_ARGS)

# Unit tests (no server) and integration tests (each starts its own servers on free ports).
test: build
	$(CARGO) test --release --no-fail-fast

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --release --all-targets -- -D warnings

# Throughput and memory against native commands and Lua (bench/run.sh), what per-counter state
# costs (bench/state.sh), and the PN-Counter figures (bench/pnc.sh). Results: docs/BENCHMARKS.md.
bench: build
	bash bench/run.sh
	bash bench/state.sh
	bash bench/pnc.sh

clean:
	$(CARGO) clean
	rm -rf $(DATA_DIR)
