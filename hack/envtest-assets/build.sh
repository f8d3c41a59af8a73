#!/usr/bin/env bash
# Builds the real kube-apiserver, etcd and kubectl used by envtest from Go
# modules (no setup-envtest download is reachable from our machines) into a
# cache outside the clone, keyed by Kubernetes version. Skips the build when
# the cached binaries are present and report the expected versions.
# The last line printed is the asset directory (for KUBEBUILDER_ASSETS).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/k8s-lease/envtest"
dir="$cache_root/${KUBE_VERSION#v}"

log() { echo "envtest-assets: $*" >&2; }

# The modules in this folder pin exact versions; refuse a mismatch instead of
# silently building something else.
grep -q "k8s.io/kubernetes $KUBE_VERSION" "$here/kube-apiserver/go.mod" ||
  { log "kube-apiserver/go.mod does not pin k8s.io/kubernetes $KUBE_VERSION"; exit 1; }
grep -q "go.etcd.io/etcd/server/v3 $ETCD_VERSION" "$here/etcd/go.mod" ||
  { log "etcd/go.mod does not pin go.etcd.io/etcd/server/v3 $ETCD_VERSION"; exit 1; }

# Output is captured before matching: `cmd | grep -q` under pipefail fails
# at random when grep exits first and cmd gets SIGPIPE.
have_version() { # binary, expected version string in --version output
  local out
  [ -x "$1" ] && out="$("$1" --version 2>/dev/null)" && [[ "$out" == *"$2"* ]]
}
kubectl_ok() {
  local out
  [ -x "$dir/kubectl" ] && out="$("$dir/kubectl" version --client 2>/dev/null)" && [[ "$out" == *"$KUBE_VERSION"* ]]
}

if have_version "$dir/kube-apiserver" "$KUBE_VERSION" &&
  have_version "$dir/etcd" "${ETCD_VERSION#v}" && kubectl_ok; then
  log "cached binaries are current"
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

start=$(date +%s)
log "building kube-apiserver and kubectl $KUBE_VERSION (about 11 minutes on 2 cores the first time)"
(cd "$here/kube-apiserver" && GOFLAGS=-mod=readonly go build -trimpath -ldflags "$ldflags" \
  -o "$tmp/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl)
log "building etcd $ETCD_VERSION"
(cd "$here/etcd" && GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w" \
  -o "$tmp/etcd" go.etcd.io/etcd/server/v3)
mv -f "$tmp/kube-apiserver" "$tmp/kubectl" "$tmp/etcd" "$dir/"

have_version "$dir/kube-apiserver" "$KUBE_VERSION" ||
  { log "built kube-apiserver does not report $KUBE_VERSION"; exit 1; }
have_version "$dir/etcd" "${ETCD_VERSION#v}" ||
  { log "built etcd does not report $ETCD_VERSION"; exit 1; }
kubectl_ok || { log "built kubectl does not report $KUBE_VERSION"; exit 1; }
log "built in $(($(date +%s) - start)) s"
echo "$dir"
