#!/usr/bin/env bash
# Installs the package from BUILD_DIR into a temporary prefix, moves the
# prefix (the package must be relocatable), then builds and runs a consumer
# with find_package(k8s_lease) and with pkg-config.
set -euo pipefail
build_dir="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build_dir" --prefix "$tmp/first" >/dev/null
mv "$tmp/first" "$tmp/prefix"
prefix="$tmp/prefix"

cmake -S "$here" -B "$tmp/cmake-consumer" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/cmake-consumer" >/dev/null
"$tmp/cmake-consumer/consumer"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib64/pkgconfig:${PKG_CONFIG_PATH:-}"
pkg-config --exists k8s_lease
g++ -std=c++17 "$here/consumer.cpp" -o "$tmp/pc-consumer" $(pkg-config --cflags --libs k8s_lease) \
  -Wl,-rpath,"$(pkg-config --variable=libdir k8s_lease)"
"$tmp/pc-consumer"
echo "consumer: find_package and pkg-config both work ($(pkg-config --modversion k8s_lease))"
