#!/usr/bin/env bash
# Installs the Debian packages the C/C++ side needs (cmake, g++, GoogleTest,
# pkg-config) when they are missing. Go and gcc come with the machine.
set -euo pipefail

missing=()
for pkg in cmake g++ make pkg-config libgtest-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "missing packages: ${missing[*]}; run: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
