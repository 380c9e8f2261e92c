#!/usr/bin/env bash
# Installs the Debian packages tandem needs to build and test. Idempotent: it
# asks apt-get only for the packages that are missing, and runs `apt-get update`
# only when there is something to install.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git python3
  libsqlite3-dev sqlite3 zlib1g-dev
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  catch2
  qt6-base-dev libgl-dev fonts-dejavu-core
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
