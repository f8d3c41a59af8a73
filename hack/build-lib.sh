#!/usr/bin/env bash
# The one recipe of libk8s_lease_wrapper.so. The Makefile ($(LIB), the
# panic-injection library, toolchain-check) and CMakeLists.txt both run it:
# the same flags, and the same list of inputs.
#
#   hack/build-lib.sh OUT_DIR [go build flags...]
#       builds OUT_DIR/libk8s_lease_wrapper.so and, beside it, the header
#       cgo writes (libk8s_lease_wrapper.h). Further arguments go to go build
#       (the Makefile's panic library: -tags k8s_lease_panic_inject).
#   hack/build-lib.sh --sources
#       the files the library is built from, relative to the repository
#       root, one a line: what a build system makes it depend on.
#   hack/build-lib.sh --soname
#       the library's DT_SONAME (also its file name).
#
# From the environment: GO (default go); CC, CGO_CFLAGS, CGO_LDFLAGS and
# the rest as go build reads them; GOTOOLCHAIN, GOCACHE; LIB_LDFLAGS, the
# linker flags before the soname (unset: "-s -w", no debug info; set and
# empty: debug info kept).
#
# Same flags, same build cache: go build keys its cache by them, so the
# c-shared, -trimpath compile of client-go is made once and reused by make's
# build, CMake's and tests/combined's (-trimpath there too).
set -euo pipefail
GO=${GO:-go}
soname=libk8s_lease_wrapper.so
module=github.com/k8s-lease/k8s-lease
usage="usage: $0 OUT_DIR [go build flags...] | --sources | --soname"
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)

case $1 in
--soname)
  echo "$soname"
  exit 0
  ;;
--sources)
  cd "$root"
  # k8s_lease_wrapper.go, the headers capi/callbacks.c includes, the module
  # files, this script (first: listed even if go list fails); then every
  # package of this module the library imports, with their C files and the
  # Go files other build tags select (the panic library's).
  printf '%s\n' k8s_lease_wrapper.go include/k8s_lease.h include/k8s_lease_compat.h go.mod go.sum hack/build-lib.sh
  list=$("$GO" list -mod=readonly -deps -f '{{if .Module}}{{if eq .Module.Path "'"$module"'"}}{{.Dir}}/ {{join .GoFiles " "}} {{join .CgoFiles " "}} {{join .IgnoredGoFiles " "}} {{join .CFiles " "}} {{join .HFiles " "}} {{join .SFiles " "}}{{end}}{{end}}' k8s_lease_wrapper.go)
  while read -r dir files; do
    [ -n "$dir" ] || continue
    dir=${dir#"$root"/}
    for f in $files; do
      [[ $f == *_test.go ]] || echo "$dir$f"
    done
  done <<<"$list"
  exit 0
  ;;
-*)
  echo "$usage" >&2
  exit 2
  ;;
esac

mkdir -p "$1"
out=$(cd "$1" && pwd)
shift
cd "$root"
export CGO_ENABLED=1
cmd=("$GO" build -buildmode=c-shared -trimpath -mod=readonly -buildvcs=false
  -ldflags "${LIB_LDFLAGS--s -w} -extldflags=-Wl,-soname,$soname" "$@" -o "$out/$soname" k8s_lease_wrapper.go)
echo "${cmd[*]}"
exec "${cmd[@]}"
