# redis-ctr: `make run` builds the module and starts redis-server with it (foreground,
# PORT=6379); `make test` runs every test. Both install what is missing first.

PORT ?= 6379
MODULE := target/release/libredis_ctr.so
DATA_DIR := data
CARGO ?= cargo
export CTR_MODULE := $(CURDIR)/$(MODULE)

.PHONY: all deps build run test unit integration lint bench clean fuzz memcheck

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

bench: build
	bash bench/run.sh

# libFuzzer on every decoder and argument parser (tests/fuzz), FUZZ_SECONDS per target.
# Installs cargo-fuzz when missing; runs on the stable toolchain (see docs/RELIABILITY.md).
FUZZ_SECONDS ?= 60
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) CARGO=$(CARGO) bash tests/fuzz/run.sh

# The integration suite's main scenarios against redis-server under valgrind memcheck; fails on
# any invalid access or definite leak attributable to the module (see docs/RELIABILITY.md).
memcheck: build
	CARGO=$(CARGO) bash tests/memcheck/run.sh

clean:
	$(CARGO) clean
	rm -rf $(DATA_DIR)
