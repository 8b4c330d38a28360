#!/usr/bin/env bash
# make-venv.sh REQUIREMENTS NAME: a Python venv with REQUIREMENTS (pinned) installed, kept outside
# the checkout in ${COHORT_VENV_ROOT:-~/.cache/cohort}/NAME so that fresh clones and CI runs on the
# same machine reuse it; reinstalled only when the requirements file changes. Prints its path on
# the last line of stdout. Needs a python3 with venv (Debian: python3-venv, installed if missing).
set -euo pipefail
requirements="$1"
venv="${COHORT_VENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/cohort}/$2"
stamp="$venv/.requirements"
if [ ! -f "$stamp" ] || ! cmp -s "$requirements" "$stamp"; then
  echo "make-venv: installing $requirements into $venv" >&2
  if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends python3-venv >&2
  fi
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements" >&2
  cp "$requirements" "$stamp"
fi
echo "$venv"
