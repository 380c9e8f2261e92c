#!/usr/bin/env bash
# The main job of a fresh checkout: build if needed, then `tandem demo`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TANDEM_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" --target tandem
exec "$build/cli/tandem" demo "$@"
