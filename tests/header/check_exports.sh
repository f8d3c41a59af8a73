#!/usr/bin/env bash
# usage: check_exports.sh LIBRARY GENERATED_HEADER
# The functions the library exports, the generated header declares,
# include/k8s_lease.h declares, and generated_header.c checks the types of
# must be the same list: a function missing from one of them fails here
# (make header-check).
set -euo pipefail
lib=$1 generated=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

exported=$(nm -D --defined-only "$lib" | awk '$2 == "T" && $3 ~ /^K8s/ { print $3 }' | sort -u)
in_generated=$(grep -oE '^extern [a-z* ]+\bK8s[A-Za-z]+\(' "$generated" | grep -oE 'K8s[A-Za-z]+' | sort -u)
in_public=$(grep -oE '^(int|void|(const )?char\*) K8s[A-Za-z]+\(' "$root/include/k8s_lease.h" | grep -oE 'K8s[A-Za-z]+' | sort -u)
in_check=$(grep -oE '\bK8s[A-Za-z]+\b' "$here/generated_header.c" | sort -u)

status=0
compare() {
  if ! diff <(echo "$exported") <(echo "$2") >/dev/null; then
    echo "check_exports: $1 does not list what $lib exports (< exported only, > listed only):" >&2
    diff <(echo "$exported") <(echo "$2") | grep '^[<>]' >&2 || true
    status=1
  fi
}
compare "$generated" "$in_generated"
compare "include/k8s_lease.h" "$in_public"
compare "tests/header/generated_header.c" "$in_check"
[ "$status" = 0 ] && echo "check_exports: $(echo "$exported" | wc -l) functions exported, declared in both headers and type-checked"
exit $status
