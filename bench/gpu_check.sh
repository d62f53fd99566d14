#!/usr/bin/env bash
# Every GPU check of the CUDA build in one run, on a machine with an NVIDIA GPU (compute capability
# 8.0+), in a few minutes: builds the op library with SPEC_EDGE_BUILD_CUDA=ON against this
# machine's torch (for its GPU only), runs the GPU tests (token agreement with the CPU build, the
# laws, the errors) and the GPU benchmark.
# Usage: bench/gpu_check.sh [--write docs/BENCHMARKS.md]   (PYTHON=... picks the interpreter;
# LOG_DIR=dir keeps the test and benchmark output there)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
build=build/gpu
logs=${LOG_DIR:-$build}
mkdir -p "$build" "$logs"
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader || true
torch_prefix=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S . -B "$build" -G Ninja -DCMAKE_PREFIX_PATH="$torch_prefix" -DSPEC_EDGE_BUILD_CUDA=ON \
  -DSPEC_EDGE_CUDA_ARCHITECTURES="${SPEC_EDGE_CUDA_ARCHITECTURES:-native}" -DSPEC_EDGE_BUILD_TESTS=OFF \
  -DSPEC_EDGE_BUILD_EXECUTORCH=OFF -DSPEC_EDGE_BUILD_RUNNER=OFF -DSPEC_EDGE_BUILD_JNI=OFF \
  -DPython_EXECUTABLE="$(command -v "$py")" -DSPEC_EDGE_PYTHON_LIB_DIR="$PWD/$build/lib" >/dev/null
cmake --build "$build" --target spec_edge_aten -j "$(nproc)"
cmake --install "$build" >/dev/null
export SPEC_EDGE_LIB_DIR="$PWD/$build/lib" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
"$py" -c 'import spec_edge, torch; assert spec_edge.has_cuda_kernels() and torch.cuda.is_available(), "no GPU or no CUDA kernels"'
set +e
"$py" -m pytest -q -rs -p no:cacheprovider -s tests/test_cuda.py 2>&1 | tee "$logs/gpu_tests.log"
tests=${PIPESTATUS[0]}
"$py" bench/bench_cuda.py "$@" 2>&1 | tee "$logs/gpu_bench.log"
bench=${PIPESTATUS[0]}
set -e
echo "gpu_check: tests exit $tests, benchmark exit $bench"
[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]
