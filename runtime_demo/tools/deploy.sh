#!/usr/bin/env bash
# Assembles what a 64-bit Arm Linux board (Raspberry Pi 4/5) needs to run spec-edge-run, and
# optionally copies it there: the CLI and tokenizer tool, spec_edge's kernel library, the
# ExecuTorch libraries they load (from the aarch64 executorch wheel), and a model directory.
# Everything lands in one flat directory; the binaries find the libraries beside them ($ORIGIN).
# See docs/DEPLOY.md.
#
# Usage: runtime_demo/tools/deploy.sh OUT_DIR [--model-dir DIR] [--to USER@HOST:PATH]
#   --model-dir  an exported pair (default build/demo, which `make demo` writes)
#   --to         also copy OUT_DIR there (rsync, else scp)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ ! -d .venv/bin ] || export PATH="$PWD/.venv/bin:$PATH"  # CMake >= 3.28 and the exporting Python

usage() { sed -n '8,10p' "$0" | sed 's/^# //' >&2; exit 2; }
[ $# -ge 1 ] || usage
out=$1
shift
model_dir=build/demo
to=
while [ $# -gt 0 ]; do
  case "$1" in
    --model-dir) model_dir=${2:?--model-dir needs a directory}; shift 2 ;;
    --to) to=${2:?--to needs USER@HOST:PATH}; shift 2 ;;
    *) echo "deploy.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
for f in manifest.json draft.pte target.pte; do
  [ -f "$model_dir/$f" ] || { echo "deploy.sh: $model_dir/$f not found (run make demo, or pass --model-dir)" >&2; exit 1; }
done

# The cross build (cached: the wheel download and ninja skip what is up to date).
runtime_demo/tools/fetch_executorch.sh
cmake --preset linux-aarch64 -Wno-deprecated >/dev/null
cmake --build --preset linux-aarch64 --target spec-edge-run spec-edge-tokenize
cmake --install build/aarch64 >/dev/null  # RUNPATH $ORIGIN, into build/aarch64/lib
built=build/aarch64/lib
wheel_lib=build/third_party/executorch-manylinux_2_28_aarch64/executorch/lib

rm -rf "$out"
mkdir -p "$out/model"
cp "$built/spec-edge-run" "$built/spec-edge-tokenize" "$built/libspec_edge_executorch.so" "$out/"
# The wheel's libraries the binaries need, followed through their own dependencies.
pending=("$out/spec-edge-run" "$out/libspec_edge_executorch.so")
while [ ${#pending[@]} -gt 0 ]; do
  file=${pending[0]}
  pending=("${pending[@]:1}")
  for lib in $(readelf -d "$file" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    if [ -f "$wheel_lib/$lib" ] && [ ! -f "$out/$lib" ]; then
      cp "$wheel_lib/$lib" "$out/"
      pending+=("$out/$lib")
    fi
  done
done
cp "$model_dir/manifest.json" "$model_dir/draft.pte" "$model_dir/target.pte" "$out/model/"
[ ! -f "$model_dir/tokenizer.json" ] || cp "$model_dir/tokenizer.json" "$out/model/"
echo "deploy.sh: $out ($(du -sh "$out" | cut -f1)):"
ls -l "$out" "$out/model" | sed 's/^/  /'

if [ -n "$to" ]; then
  if command -v rsync >/dev/null; then
    rsync -a --delete "$out/" "$to/"
  else
    scp -rq "$out/." "$to/"
  fi
  echo "deploy.sh: copied to $to; on the board: cd ${to#*:} && ./spec-edge-run --model-dir model --prompt 'def main():'"
fi
