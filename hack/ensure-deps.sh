#!/usr/bin/env bash
# Installs the Debian packages the C/C++ side needs (cmake, g++, GoogleTest,
# pkg-config) and promtool (package prometheus: the alert rules' tests) when
# they are missing. Go and gcc come with the machine.
set -euo pipefail

missing=()
for pkg in cmake g++ make pkg-config libgtest-dev prometheus; do
  # Installed, not merely known (a removed package keeps its config files).
  [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" = "install ok installed" ] || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "missing packages: ${missing[*]}; run: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]}" >&2
apt-get update -qq
# The prometheus package would start its server: only promtool is wanted,
# so no package may start a service while this installs (policy-rc.d's
# "action forbidden", unless the machine has a policy of its own).
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
