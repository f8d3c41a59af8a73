#!/usr/bin/env bash
# Installs the package from BUILD_DIR into a temporary prefix, moves the
# prefix (the package must be relocatable), then builds and runs a consumer
# with find_package(k8s_lease) and with pkg-config; both must report the
# repository's VERSION, and the library the installed header's.
set -euo pipefail
build_dir="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build_dir" --prefix "$tmp/first" >/dev/null
mv "$tmp/first" "$tmp/prefix"
prefix="$tmp/prefix"

version=$(cat "$here/../../VERSION")
cmake -S "$here" -B "$tmp/cmake-consumer" -DCMAKE_PREFIX_PATH="$prefix" -DK8S_LEASE_EXPECTED_VERSION="$version" >/dev/null
cmake --build "$tmp/cmake-consumer" >/dev/null
"$tmp/cmake-consumer/consumer"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib64/pkgconfig:${PKG_CONFIG_PATH:-}"
pkg-config --exact-version="$version" k8s_lease || { echo "consumer: pkg-config has k8s_lease $(pkg-config --modversion k8s_lease), VERSION is $version" >&2; exit 1; }
g++ -std=c++17 "$here/consumer.cpp" -o "$tmp/pc-consumer" $(pkg-config --cflags --libs k8s_lease) \
  -Wl,-rpath,"$(pkg-config --variable=libdir k8s_lease)"
"$tmp/pc-consumer"
echo "consumer: find_package and pkg-config both work ($(pkg-config --modversion k8s_lease))"
