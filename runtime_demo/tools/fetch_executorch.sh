#!/usr/bin/env bash
# Unpacks the executorch wheel of another platform (its C++ runtime, kernels, XNNPACK and CMake
# package) for cross-building the runner, at the version this Python environment exports with.
# Cached: a second call with the same version does nothing.
# Usage: fetch_executorch.sh [PLATFORM] [DEST]
#   PLATFORM  a pip platform tag (default manylinux_2_28_aarch64)
#   DEST      where executorch/ is unpacked (default build/third_party/executorch-PLATFORM)
# The CMake package is then DEST/executorch/share/cmake (the linux-aarch64 preset's executorch_DIR).
set -euo pipefail
cd "$(dirname "$0")/../.."
platform=${1:-manylinux_2_28_aarch64}
dest=${2:-build/third_party/executorch-$platform}
python=${PYTHON:-python}

version=$("$python" -c 'import importlib.metadata as m; print(m.version("executorch"))') || {
  echo "fetch_executorch: executorch is not installed in $python (make venv installs the pinned one)" >&2
  exit 1
}
stamp="$dest/.version"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$version" ]; then
  exit 0
fi

download=$(mktemp -d)
trap 'rm -rf "$download"' EXIT
pyver=$("$python" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
echo "fetch_executorch: executorch==$version for $platform -> $dest"
"$python" -m pip download -q --no-deps --only-binary=:all: --platform "$platform" \
  --python-version "$pyver" --implementation cp -d "$download" "executorch==$version"
rm -rf "$dest"
mkdir -p "$dest"
# Only the C++ side: libraries, headers, the CMake package (not the Python modules).
"$python" - "$download"/executorch-*.whl "$dest" <<'EOF'
import sys, zipfile
wheel, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    members = [n for n in z.namelist() if n.startswith(("executorch/lib/", "executorch/include/", "executorch/share/"))]
    z.extractall(dest, members)
    for info in z.infolist():  # zipfile drops the executable bit
        if info.filename in members and info.external_attr >> 16 & 0o111:
            import os; os.chmod(os.path.join(dest, info.filename), info.external_attr >> 16 & 0o777)
EOF
echo "$version" > "$stamp"
