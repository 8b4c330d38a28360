#!/usr/bin/env bash
# apt-install-missing.sh WHO PACKAGE...: installs those of Debian's PACKAGEs not installed yet (one
# `apt-get update` only when something is missing), saying "WHO: installing ..." first. The one
# install step of scripts/setup.sh, scripts/setup-test-tools.sh and bench/fuzz.sh.
set -euo pipefail
who="$1"; shift
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -gt 0 ] || exit 0
echo "$who: installing ${missing[*]}"
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
