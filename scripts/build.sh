#!/usr/bin/env bash
# Installs the Debian packages (if missing), configures and builds tandem into
# build/ (or $TANDEM_BUILD_DIR). Extra arguments go to `cmake --build`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TANDEM_BUILD_DIR:-$root/build}
"$root/scripts/install-deps.sh"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build" -j "$(nproc)" "$@"
