#pragma once
// What the CUDA executor (engine/cuda/) can run, decided from a Plan alone,
// so the answer is the same on a laptop (`tandem plan`) as on the GPU
// machine (the executor refuses with the same words before it allocates).

#include <cstdint>
#include <optional>
#include <string>

namespace tandem {

struct Plan;

// Attention head widths the executor's attention kernels take: 16, 32 and
// 64 in any precision (engine/cuda/attention.cu, attention_tc.cu), 128 in
// bf16 on the tensor-core kernels only (their Hopper code; the executor
// checks the device when it starts).
inline bool gpuAttentionHeadWidthSupported(int64_t width) { return width == 16 || width == 32 || width == 64; }
inline bool gpuAttentionHeadWidthSupported(int64_t width, bool bf16) {
  return gpuAttentionHeadWidthSupported(width) || (bf16 && width == 128);
}

// Why the CUDA executor would not run `plan` (the first reason, one line,
// naming the job field and what runs it instead), or nothing when it would.
// Memory is not judged here: that depends on the GPU (gpu_footprint.h).
std::optional<std::string> gpuRunRefusal(const Plan& plan);

}  // namespace tandem
