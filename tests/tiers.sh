#!/usr/bin/env bash
# The C++ test tiers beyond the native build: sanitizers, aarch64 under qemu, the fuzzer, the
# CUDA build.
# Each tier runs when its tools are present and says clearly when it skips; with CI set, a
# missing tool is a failure, not a skip.
# Usage: tests/tiers.sh sanitize|aarch64|fuzz|cuda
set -euo pipefail
cd "$(dirname "$0")/.."
tier=$1

need() {  # need TOOL... : all present, or skip (fail in CI)
  for tool in "$@"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      if [ -n "${CI:-}" ]; then
        echo "FAILED $tier tier: '$tool' is missing (CI installs it through .ci/run)" >&2
        exit 1
      fi
      echo "SKIPPED $tier tier: '$tool' is not installed (see .ci/run for the packages)"
      exit 0
    fi
  done
}

case "$tier" in
  sanitize)  # ASan + UBSan over the C++ tests and the runner (tests/test_runner_builds.py runs it), natively
    executorch_dir=$(python -c 'import executorch, os; print(os.path.join(executorch.__path__[0], "share", "cmake"))')
    cmake --preset sanitize -DSPEC_EDGE_BUILD_EXECUTORCH=ON -DSPEC_EDGE_BUILD_RUNNER=ON \
      -Dexecutorch_DIR="$executorch_dir" >/dev/null
    cmake --build --preset sanitize
    ctest --preset sanitize
    ;;
  aarch64)  # cross-built core, tests, runner and JNI bridge under qemu, two CPU models; same results as x86-64
    need aarch64-linux-gnu-g++ qemu-aarch64
    runtime_demo/tools/fetch_executorch.sh  # the aarch64 executorch wheel, cached in build/third_party
    android/tools/fetch_jre.sh  # Debian's arm64 JRE, for the Java API under qemu (tests/test_android.py)
    cmake --preset linux-aarch64 >/dev/null
    cmake --build --preset linux-aarch64
    native=build/cmake/tests/cpp/spec_edge_cross_isa_vectors
    [ -x "$native" ] || { echo "build the native tests first (make build)" >&2; exit 1; }
    "$native" > build/aarch64/vectors-x86_64.txt
    for cpu in cortex-a72 cortex-a76; do
      # 10^5 random path-identity cases on the A72 model, a fifth of that on the second one
      cases=100000
      [ "$cpu" = cortex-a72 ] || cases=20000
      echo "== aarch64 under qemu, QEMU_CPU=$cpu, $cases path-identity cases"
      SPEC_EDGE_PATH_CASES=$cases QEMU_CPU=$cpu ctest --preset linux-aarch64
      QEMU_CPU=$cpu qemu-aarch64 -L /usr/aarch64-linux-gnu build/aarch64/tests/cpp/spec_edge_cross_isa_vectors \
        > "build/aarch64/vectors-$cpu.txt"
      if ! cmp -s build/aarch64/vectors-x86_64.txt "build/aarch64/vectors-$cpu.txt"; then
        echo "FAILED: aarch64 ($cpu) results differ from x86-64:" >&2
        diff build/aarch64/vectors-x86_64.txt "build/aarch64/vectors-$cpu.txt" | head -20 >&2
        exit 1
      fi
      echo "cross-ISA vectors: aarch64 ($cpu) identical to x86-64 ($(wc -l < build/aarch64/vectors-x86_64.txt) results)"
    done
    echo "== aarch64 ASan + UBSan under qemu"
    cmake --preset linux-aarch64-sanitize >/dev/null
    cmake --build --preset linux-aarch64-sanitize
    SPEC_EDGE_PATH_CASES=20000 QEMU_CPU=cortex-a72 ctest --preset linux-aarch64-sanitize
    ;;
  fuzz)  # coverage-guided fuzzing of the core's entry points for a bounded time
    need clang++
    if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
        clang++ -x c++ -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then
      need libFuzzer-runtime  # clang without libclang-rt-*-dev
    fi
    cmake --preset fuzz >/dev/null
    cmake --build --preset fuzz
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    mkdir "$work/corpus"  # new inputs land here; the kept corpus is only read
    set +e
    build/fuzz/tests/fuzz/spec_edge_fuzz_ops -max_total_time="${FUZZ_SECONDS:-30}" -max_len=4096 \
      -artifact_prefix=build/fuzz/ -print_final_stats=1 "$work/corpus" tests/fuzz/corpus > "$work/log" 2>&1
    status=$?
    set -e
    grep -E "^(Done|stat::number_of_executed_units|==[0-9]+==|SUMMARY)" "$work/log" || true
    [ "$status" -eq 0 ] || { tail -30 "$work/log" >&2; echo "FAILED: the fuzzer found a crash (see build/fuzz/crash-*)" >&2; exit 1; }
    echo "fuzz: zero findings"
    ;;
  cuda)  # the CUDA build compiled with nvcc for every supported architecture; its GPU tests run
         # where a GPU is (bench/gpu_check.sh) and skip here, saying so
    need nvcc
    torch_prefix=$(python -c 'import torch; print(torch.utils.cmake_prefix_path)')
    cmake -S . -B build/cuda -G Ninja -DCMAKE_PREFIX_PATH="$torch_prefix" -DSPEC_EDGE_BUILD_CUDA=ON \
      -DSPEC_EDGE_CUDA_ARCHITECTURES="80;86;89;90" -DSPEC_EDGE_BUILD_TESTS=OFF -DSPEC_EDGE_BUILD_EXECUTORCH=OFF \
      -DSPEC_EDGE_BUILD_RUNNER=OFF -DSPEC_EDGE_BUILD_JNI=OFF -DSPEC_EDGE_PYTHON_LIB_DIR="$PWD/build/cuda/lib" >/dev/null
    cmake --build build/cuda --target spec_edge_aten
    cmake --install build/cuda >/dev/null
    # The CUDA-enabled library serves CPU tensors as the default one does.
    SPEC_EDGE_LIB_DIR="$PWD/build/cuda/lib" python -m pytest -q -rs -p no:cacheprovider \
      tests/test_cuda.py tests/test_bad_input.py tests/test_ops.py
    echo "cuda: compiled for sm_80, sm_86, sm_89, sm_90"
    ;;
  *) echo "usage: $0 sanitize|aarch64|fuzz|cuda" >&2; exit 2 ;;
esac
