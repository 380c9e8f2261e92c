#!/usr/bin/env bash
# Builds the CPU parts (engine, simulator, traces, CLI, GUI; no CUDA) with
# AddressSanitizer and UndefinedBehaviorSanitizer into build-asan/ (or
# $TANDEM_ASAN_BUILD_DIR) and runs their tests. Any use of freed memory, overflow
# or undefined behaviour fails the test that hit it. Leaks inside the system's
# fontconfig (loaded by Qt's offscreen platform) are not ours and are
# suppressed (scripts/lsan-suppressions.txt). About 30 minutes on 2 cores;
# not part of CI for that reason.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TANDEM_ASAN_BUILD_DIR:-$root/build-asan}
"$root/scripts/install-deps.sh"
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_WITH_CUDA=OFF \
    -DTANDEM_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined"
fi
cmake --build "$build" -j "$(nproc)"
cd "$build"
export QT_QPA_PLATFORM=offscreen
export ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1
export LSAN_OPTIONS=suppressions=$root/scripts/lsan-suppressions.txt
export UBSAN_OPTIONS=print_stacktrace=1
ctest --output-on-failure -j "$(nproc)"
