#!/usr/bin/env bash
# usage: tests/combined/run.sh   (make combined-check; GO, CC, CXX as make's)
#
# Our first user's combined build, as they run it: in a module of their own
# (here a scratch module under build/_combined that requires this module and
# replaces it with this checkout), their etcd_wrapper.go (main, its own cgo
# preamble and exports; testdata/etcd_wrapper.go stands in, without etcd)
# beside a copy of embedded/k8s_lease_wrapper.go, then
#
#   go mod tidy
#   go build -buildmode=c-shared -o libcombined.so etcd_wrapper.go k8s_lease_wrapper.go
#
# (with -trimpath, as the LIB recipe builds: the compiled client-go is then
# the build cache's, not a second compile). Checked: this module's own
# builds leave the embedded file out, and its preamble is the root file's;
# the library exports every function of include/k8s_lease.h and
# include/k8s_lease_compat.h but K8sLeaseStandalone, plus the other file's, and nothing else of ours; its
# generated header declares exactly those, compiles as C11 and C++17 with
# every warning an error and has the types of package capi's definitions;
# and a C program linked against it calls both files' exports in one
# process (K8sLeaseInit does not refuse: one Go runtime). Offline: no step
# needs the network.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
GO=${GO:-go} CC=${CC:-cc} CXX=${CXX:-c++}
work=$root/build/_combined
cd "$root"
export GOPROXY=off CGO_ENABLED=1
# The tag: this module's builds, vet and tests leave the file out (go mod
# tidy reads it, as it must in the user's module, and finds nothing to
# change: it imports only package capi of this module).
ignored=$("$GO" list -e -f '{{join .IgnoredGoFiles " "}} go files: [{{join .GoFiles " "}}]' ./embedded)
[ "$ignored" = "k8s_lease_wrapper.go go files: []" ] || { echo "combined: ./embedded is not left out of this module's builds: $ignored" >&2; exit 1; }
if "$GO" list ./... | grep -q '/embedded$'; then echo "combined: go list ./... lists ./embedded" >&2; exit 1; fi
echo "combined: ./embedded is left out of ./... (ignored: k8s_lease_wrapper.go)"
# ...but vetted under its tag (the race-instrumented packages are the vet
# stage's, cached), and its preamble checked against the root file's.
"$GO" vet -race -tags k8s_lease_embedded ./embedded
"$GO" test -count=1 ./tests/combined

rm -rf "$work" && mkdir -p "$work/hdr"
cp tests/combined/testdata/etcd_wrapper.go embedded/k8s_lease_wrapper.go "$work/"
# Their go line is their build image's Go (1.25.9); go mod tidy raises it
# to this module's (see docs/embedding.md: which Go the library needs).
cat > "$work/go.mod" <<MOD
module example.com/ha-wrapper

go 1.25.9

require github.com/k8s-lease/k8s-lease v0.0.0

replace github.com/k8s-lease/k8s-lease => $root
MOD
# Offline, go mod tidy cannot ask sum.golang.org for the hashes of the
# modules it adds: this module's go.sum holds them (verified when they were
# added here), and tidy drops what the scratch module does not need.
cp go.sum "$work/go.sum"
cd "$work"
GOFLAGS=-mod=mod "$GO" mod tidy
grep -q '^	k8s.io/client-go v' go.mod || { echo "combined: go mod tidy did not add client-go: it did not see k8s_lease_wrapper.go's imports" >&2; cat go.mod >&2; exit 1; }
echo "combined: go mod tidy: $(grep '^go ' go.mod) (was go 1.25.9), $(grep -c '// indirect' go.mod) indirect requirements"
start=$(date +%s%N)
GOFLAGS=-mod=readonly "$GO" build -buildmode=c-shared -trimpath -o libcombined.so etcd_wrapper.go k8s_lease_wrapper.go
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "combined: go build -buildmode=c-shared -trimpath -o libcombined.so etcd_wrapper.go k8s_lease_wrapper.go: $((ms / 1000)).$((ms % 1000 / 100)) s"

# The generated header: strict C11 and C++17, and the types of package
# capi's definitions (tests/header/generated_header.c with
# K8S_LEASE_CHECK_CAPI lists every function but K8sLeaseStandalone). It
# includes "libk8s_lease_wrapper.h": a copy under that name.
cp libcombined.h hdr/libk8s_lease_wrapper.h
"$CC" -std=c11 -Wall -Wextra -Werror -pedantic -DK8S_LEASE_CHECK_CAPI -Ihdr -fsyntax-only "$root/tests/header/generated_header.c"
"$CXX" -std=c++17 -Wall -Wextra -Werror -Ihdr -fsyntax-only "$root/tests/header/generated_header.cpp"
# Linked as C++: every declaration resolves to the library's C symbol.
"$CXX" -x c++ -std=c++17 -Wall -Wextra -Werror -DK8S_LEASE_CHECK_CAPI -Ihdr "$root/tests/header/generated_header.c" -x none \
  -L. -lcombined -o generated_header_cxx
echo "combined: libcombined.h compiles as C11 -pedantic and C++17 (-Wall -Wextra -Werror), with capi's types; linked as C++"

# The lists. Symbols of Go's and cgo's runtime (_cgo*, x_cgo_*, crosscall*,
# fatalf; _cgoexp_* are the Go halves of the exports) aside, the library
# exports the header's functions but K8sLeaseStandalone, and the other
# file's: not k8s_lease_embedded_anchor (hidden), nothing else.
lines() { tr ' ' '\n' | sed '/^$/d' | sort -u; }
public=$(grep -ohE '^(int|void|(const )?char\*) K8s[A-Za-z]+\(' "$root/include/k8s_lease.h" "$root/include/k8s_lease_compat.h" | grep -oE 'K8s[A-Za-z]+' | lines)
want=$(echo "$public" | grep -vx K8sLeaseStandalone)
[ "$(echo "$want" | wc -l)" -ge 20 ] && [ "$(echo "$public" | wc -l)" = "$(( $(echo "$want" | wc -l) + 1 ))" ] \
  || { echo "combined: include/k8s_lease.h and include/k8s_lease_compat.h do not declare K8sLeaseStandalone and 20 more: $public" >&2; exit 1; }
exported=$(nm -D --defined-only libcombined.so | awk '$2 == "T" { print $3 }' | grep -vE '^(_cgo|x_cgo_|crosscall[0-9]$|fatalf$)' | lines)
# (_GoStringLen and _GoStringPtr are cgo's prologue's.)
in_generated=$(grep -oE '^extern [A-Za-z0-9_* ]+\b[A-Za-z0-9_]+\(' libcombined.h | grep -oE '[A-Za-z0-9_]+\($' | tr -d '(' | grep -vE '^_GoString(Len|Ptr)$' | lines)
in_check=$(grep -oE '\bK8s[A-Za-z]+\b' "$root/tests/header/generated_header.c" | grep -vx K8sLeaseStandalone | lines)
status=0
compare() { # what, got, expected
  if [ "$2" != "$3" ]; then
    echo "combined: $1 (< listed, > expected):" >&2
    diff <(echo "$2") <(echo "$3") | grep '^[<>]' >&2 || true
    status=1
  fi
}
compare "libcombined.so exports" "$exported" "$(printf '%s\nStandInGet\nStandInPut\n' "$want" | lines)"
compare "libcombined.h declares" "$in_generated" "$(printf '%s\nStandInGet\nStandInPut\nk8s_lease_embedded_anchor\n' "$want" | lines)"
compare "tests/header/generated_header.c type-checks" "$in_check" "$want"
[ "$status" = 0 ] || exit 1
echo "combined: libcombined.so exports $(echo "$want" | wc -l) functions of include/k8s_lease.h and _compat.h (all but K8sLeaseStandalone) and StandInGet, StandInPut;" \
  "libcombined.h declares them (and the hidden k8s_lease_embedded_anchor), with the header's types"

# One process, one runtime: both files' exports; K8sLeaseInit names the
# sources it tried and does not refuse; no K8sLeaseStandalone.
"$CC" -std=c11 -Wall -Wextra -Werror -pedantic -I. -o combined "$here/testdata/combined.c" -L. -lcombined -Wl,-rpath,"$work" -ldl
./combined "$work/no-such-kubeconfig"
