#!/usr/bin/env bash
# Install the Debian packages ingestd needs, if any are missing.
# As root: apt-get install them. Otherwise: print the exact command and fail.
set -euo pipefail

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "ensure-system-deps: not a Debian/Ubuntu system; make sure these are installed: $*" >&2
  exit 0
fi

missing=()
for pkg in "$@"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  echo "ensure-system-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "ensure-system-deps: missing packages; run:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
