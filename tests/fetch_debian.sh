#!/usr/bin/env bash
# Unpacks Debian packages (not their dependencies) into DEST without installing them, for test
# dependencies a machine may lack: apt resolves them with a private state directory, so the
# machine's dpkg architectures, package lists and installed packages are left as they are, and
# no root is needed.
# Usage: tests/fetch_debian.sh ARCH DEST PACKAGE...   (ARCH: a Debian architecture, e.g. arm64)
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 ARCH DEST PACKAGE..." >&2; exit 2; }
arch=$1 dest=$2
shift 2
command -v apt-get >/dev/null || { echo "fetch_debian: needs apt-get (Debian/Ubuntu)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/state/lists/partial" "$work/cache/archives/partial" "$work/debs"
touch "$work/state/status"
apt=(apt-get -q -o APT::Architecture="$arch" -o APT::Architectures::="$arch" -o Dir::State="$work/state"
     -o Dir::State::status="$work/state/status" -o Dir::Cache="$work/cache" -o Debug::NoLocking=1
     -o APT::Sandbox::User=root)
echo "fetch_debian: $* ($arch) -> $dest"
"${apt[@]}" update >/dev/null
(cd "$work/debs" && "${apt[@]}" download "$@" >/dev/null)
mkdir -p "$dest"
for deb in "$work"/debs/*.deb; do
  dpkg-deb -x "$deb" "$dest"
done
