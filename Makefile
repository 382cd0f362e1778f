# flywheel entry points. See README.md.
#   make deps   install every Debian package the project needs (idempotent)
#   make build  configure + build (build/)
#   make test   deps + build + every test (ctest, pytest, fuzz smoke)
#   make demo   deps + build + the main job
#   make bench  deps + build + benchmarks -> bench/results/*.json
#   make fuzz   build the libFuzzer targets with clang and run each for FUZZ_SECONDS
#   make asan-stress  the replay stress test under AddressSanitizer (STRESS_SECONDS)

PYTHON ?= /usr/bin/python3
BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
SAN ?=
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 30
# Per fuzz target inside `make test` (kept short: 17 targets run one after another).
TEST_FUZZ_SECONDS ?= 10
STRESS_SECONDS ?= 30
CTEST_ARGS ?=

DEB_PACKAGES := build-essential cmake ninja-build ccache pkg-config \
  libgtest-dev libgmock-dev libbenchmark-dev libabsl-dev libzstd-dev liblz4-dev \
  libxxhash-dev nlohmann-json3-dev libcli11-dev pybind11-dev python3-dev \
  python3-numpy python3-pytest clang libclang-rt-14-dev \
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
  python3-torch openmpi-bin libturbojpeg0-dev libjpeg62-turbo-dev python3-pil liburing-dev \
  libsnappy-dev libbrotli-dev zlib1g-dev \
  libsqlite3-dev libpq-dev postgresql python3-jsonschema python3-rfc3987 libssl-dev chromium

ifneq ($(SAN),)
  BUILD := build-$(SAN)
  SAN_FLAG := -DFLYWHEEL_SANITIZE=$(SAN) -DFLYWHEEL_BUILD_PYTHON=OFF
endif

.PHONY: deps build test demo table-demo bench fuzz clean ctest pytest format asan-stress

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

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DFLYWHEEL_PYTHON=$(PYTHON) -DCMAKE_CXX_COMPILER_LAUNCHER=ccache $(SAN_FLAG)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

ctest:
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

pytest:
	PYTHONPATH=$(CURDIR)/$(BUILD)/python FLYWHEEL_BIN=$(CURDIR)/$(BUILD)/src/flywheel/cli/flywheel \
	  $(PYTHON) -m pytest -q tests/python

test: build
	$(MAKE) --no-print-directory ctest
ifeq ($(SAN),)
	$(MAKE) --no-print-directory pytest
	$(MAKE) --no-print-directory asan-stress
	$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(TEST_FUZZ_SECONDS)
endif

# The replay stress test (uniform table: eviction, mutation, sampling from 16
# threads) built with AddressSanitizer, as the replay issue asks of CI.
asan-stress: deps
	cmake -S . -B build-asan-stress -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLYWHEEL_SANITIZE=address \
	  -DFLYWHEEL_BUILD_PYTHON=OFF -DFLYWHEEL_BUILD_BENCH=OFF -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
	cmake --build build-asan-stress -j $(JOBS) --target replay_stress_test
	FLYWHEEL_STRESS_SECONDS=$(STRESS_SECONDS) build-asan-stress/tests/replay_stress_test --gtest_filter='*Uniform*'

# The main job: PPO solves CartPole-v1 (server, learner and actors under
# `flywheel run`); the run directory is runs/cartpole_ppo.
demo: build
	FLYWHEEL_PYTHON=$(PYTHON) $(BUILD)/src/flywheel/cli/flywheel run examples/cartpole_ppo.toml --fresh

# The versioned-table walkthrough (the previous demo).
table-demo: build
	bash examples/table_demo.sh $(BUILD)/src/flywheel/cli/flywheel

bench: build
	bash bench/run_all.sh $(BUILD)

fuzz: deps
	cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DFLYWHEEL_FUZZ=ON \
	  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
	cmake --build build-fuzz -j $(JOBS)
	bash fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

format:
	clang-format -i $$(git ls-files '*.h' '*.cc')

clean:
	rm -rf build build-* 
