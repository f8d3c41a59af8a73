#!/usr/bin/env bash
# usage: check_exports.sh LIBRARY GENERATED_HEADER
# The functions the library exports, the generated header declares, the
# hand-written headers declare (include/k8s_lease.h and
# include/k8s_lease_compat.h together, each function in one of them only),
# and generated_header.c checks the types of must be the same list: a
# function missing from one of them fails here (make header-check).
set -euo pipefail
lib=$1 generated=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

exported=$(nm -D --defined-only "$lib" | awk '$2 == "T" && $3 ~ /^K8s/ { print $3 }' | sort -u)
in_generated=$(grep -oE '^extern [a-z* ]+\bK8s[A-Za-z]+\(' "$generated" | grep -oE 'K8s[A-Za-z]+' | sort -u)
declared() { grep -oE '^(int|void|(const )?char\*) K8s[A-Za-z]+\(' "$@" | grep -oE 'K8s[A-Za-z]+'; }
in_public=$(declared "$root/include/k8s_lease.h" "$root/include/k8s_lease_compat.h" | sort -u)
twice=$(declared "$root/include/k8s_lease.h" "$root/include/k8s_lease_compat.h" | sort | uniq -d)
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
compare "include/k8s_lease.h + include/k8s_lease_compat.h" "$in_public"
if [ -n "$twice" ]; then
  echo "check_exports: declared in both include/k8s_lease.h and include/k8s_lease_compat.h:" $twice >&2
  status=1
fi
compare "tests/header/generated_header.c" "$in_check"
[ "$status" = 0 ] && echo "check_exports: $(echo "$exported" | wc -l) functions exported, declared in the generated and the hand-written headers, and type-checked"
exit $status
