#!/bin/bash
# Collects the GPU binaries of a build folder and the non-CUDA shared
# libraries they need into BUILD/dist, small enough to copy to a GPU machine.
#   tests/gpu/make_dist.sh BUILD_DIR PEER_SCRIPT
set -eu
BUILD=$1; PEER=${2:-}
D=$BUILD/dist
rm -rf "$D"; mkdir -p "$D/bin" "$D/lib" "$D/peers"
cp "$BUILD/cli/tandem" "$BUILD"/tests/gpu/gpu_test_* "$BUILD/bench/bench_gpt2_h200" "$BUILD/bench/bench_gelu_gemm" \
  "$BUILD/bench/bench_sim_vs_real" "$BUILD/bench/bench_energy_by_op" "$BUILD/bench/bench_layernorm_bwd" \
  "$BUILD/bench/bench_profiler_overhead" "$BUILD/bench/bench_fp8_gemm" "$BUILD/bench/bench_fp8_writers" "$BUILD/bench/bench_materialized_attention" \
  "$BUILD/bench/bench_kernel_pairs" "$D/bin/"
strip "$D"/bin/*
for lib in $(ldd "$D/bin/tandem" | awk '/yaml-cpp|libfmt|sqlite3/ {print $3}'); do cp -L "$lib" "$D/lib/"; done
[ -n "$PEER" ] && cp "$PEER" "$D/peers/"
cp "$(dirname "$0")/../../bench/peers/llama_torch.py" "$D/peers/"
cp "$(dirname "$0")/../../bench/peers/materialized_attention_torch.py" "$D/peers/"
du -sh "$D"
