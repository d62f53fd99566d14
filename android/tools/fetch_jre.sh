#!/usr/bin/env bash
# Unpacks Debian's arm64 Java runtime (openjdk-17-jre-headless, and the zlib it links) without
# installing it (tests/fetch_debian.sh), so the tests run the Java API through the aarch64 JNI
# library under qemu-aarch64. Cached: a second call does nothing.
# Usage: fetch_jre.sh [DEST]   (default build/third_party/jre-arm64)
# Then: qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=DEST/lib/aarch64-linux-gnu DEST/java/bin/java
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=${1:-build/third_party/jre-arm64}
packages=(openjdk-17-jre-headless zlib1g)
if [ -x "$dest/java/bin/java" ] && [ "$(cat "$dest/.packages" 2>/dev/null)" = "${packages[*]}" ]; then
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tests/fetch_debian.sh arm64 "$work/root" "${packages[@]}"
rm -rf "$dest"
mkdir -p "$dest"
cp -a "$work/root/usr/lib/jvm/java-17-openjdk-arm64/." "$dest/java"
# conf/ links into /etc/java-17-openjdk: the package's own copy instead of the host's.
rm -rf "$dest/java/conf"
cp -a "$work/root/etc/java-17-openjdk" "$dest/java/conf"
mkdir -p "$dest/lib"
cp -a "$work/root/lib/aarch64-linux-gnu" "$dest/lib/"  # zlib
echo "${packages[*]}" > "$dest/.packages"
