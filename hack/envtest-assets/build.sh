#!/usr/bin/env bash
# Builds the real kube-apiserver, etcd and kubectl used by envtest from Go
# modules (no setup-envtest download is reachable from our machines) into a
# cache outside the clone, keyed by Kubernetes version.
#
#   hack/envtest-assets/build.sh [BINARY...]
#       builds the named binaries (kube-apiserver, etcd, kubectl; none
#       named: all three) that are missing from the cache or do not report
#       the expected version, and leaves the others as they are. The last
#       line printed is the asset directory (for KUBEBUILDER_ASSETS).
#       envtest starts kube-apiserver and etcd; kubectl is for the tests
#       that run it (make test's), so `make demo` names the first two.
#   hack/envtest-assets/build.sh --missing [BINARY...]
#       prints those of the named binaries that a build would make, one a
#       line (nothing: all are current), and builds nothing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/k8s-lease/envtest"
dir="$cache_root/${KUBE_VERSION#v}"

log() { echo "envtest-assets: $*" >&2; }

only_missing=false
if [ "${1:-}" = --missing ]; then
  only_missing=true
  shift
fi
wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(kube-apiserver etcd kubectl)
for bin in "${wanted[@]}"; do
  case $bin in
  kube-apiserver | etcd | kubectl) ;;
  *) log "unknown binary '$bin' (known: kube-apiserver etcd kubectl)"; exit 2 ;;
  esac
done

# The modules in this folder pin exact versions; refuse a mismatch instead of
# silently building something else.
grep -q "k8s.io/kubernetes $KUBE_VERSION" "$here/kube-apiserver/go.mod" ||
  { log "kube-apiserver/go.mod does not pin k8s.io/kubernetes $KUBE_VERSION"; exit 1; }
grep -q "go.etcd.io/etcd/server/v3 $ETCD_VERSION" "$here/etcd/go.mod" ||
  { log "etcd/go.mod does not pin go.etcd.io/etcd/server/v3 $ETCD_VERSION"; exit 1; }

# current BINARY: it is in the cache and reports the expected version.
# Output is captured before matching: `cmd | grep -q` under pipefail fails
# at random when grep exits first and cmd gets SIGPIPE.
current() {
  local out path="$dir/$1"
  [ -x "$path" ] || return 1
  case $1 in
  kube-apiserver) out="$("$path" --version 2>/dev/null)" && [[ "$out" == *"$KUBE_VERSION"* ]] ;;
  etcd) out="$("$path" --version 2>/dev/null)" && [[ "$out" == *"${ETCD_VERSION#v}"* ]] ;;
  kubectl) out="$("$path" version --client 2>/dev/null)" && [[ "$out" == *"$KUBE_VERSION"* ]] ;;
  esac
}

missing=()
for bin in "${wanted[@]}"; do
  current "$bin" || missing+=("$bin")
done
if $only_missing; then
  [ ${#missing[@]} -eq 0 ] || printf '%s\n' "${missing[@]}"
  exit 0
fi
if [ ${#missing[@]} -eq 0 ]; then
  log "cached binaries are current (${wanted[*]})"
  echo "$dir"
  exit 0
fi

mkdir -p "$dir"
tmp="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# Version stamps so that `kubectl version` and the apiserver report the real
# release instead of v0.0.0-master.
pkg=k8s.io/component-base/version
minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
ldflags="-s -w -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
cgv=k8s.io/client-go/pkg/version
ldflags="$ldflags -X $cgv.gitVersion=$KUBE_VERSION -X $cgv.gitMajor=1 -X $cgv.gitMinor=$minor"

# kube-apiserver and kubectl come from one module: built in one go build,
# their shared packages are compiled once (a later build of the other one
# finds them in the build cache: the same flags).
kube=()
build_etcd=false
for bin in "${missing[@]}"; do
  case $bin in
  kube-apiserver | kubectl) kube+=("k8s.io/kubernetes/cmd/$bin") ;;
  etcd) build_etcd=true ;;
  esac
done

start=$(date +%s)
if [ ${#kube[@]} -gt 0 ]; then
  log "building ${kube[*]##*/} $KUBE_VERSION (minutes on 2 cores: the first time up to about 11, Go module downloads included)"
  (cd "$here/kube-apiserver" && GOFLAGS=-mod=readonly go build -trimpath -ldflags "$ldflags" \
    -o "$tmp/" "${kube[@]}")
fi
if $build_etcd; then
  log "building etcd $ETCD_VERSION (about 2 minutes on 2 cores the first time)"
  (cd "$here/etcd" && GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w" \
    -o "$tmp/etcd" go.etcd.io/etcd/server/v3)
fi
for bin in "${missing[@]}"; do
  mv -f "$tmp/$bin" "$dir/"
  current "$bin" || { log "built $bin does not report the expected version"; exit 1; }
done
log "built ${missing[*]} in $(($(date +%s) - start)) s"
echo "$dir"
