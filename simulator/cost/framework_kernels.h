#pragma once
// Other frameworks' kernels for a task's arithmetic (OpAttrs::eager,
// OpAttrs::flash2; engine/passes/framework_kernels.h), as the roofline
// times them.
//
// Eager PyTorch runs a model's Python op by op: each step of an RMSNorm
// (the fp32 upcast, the square, the mean, the scale, the cast back, the
// weight), of the SwiGLU (silu, the product), of the loss (the fp32 upcast
// of the logits, log-softmax, the gather) and around the attention (rotary
// embedding on q and k in fp32 complex arithmetic, the grouped keys and
// values repeated to every query head, the output's transpose) is a kernel
// that reads and writes whole tensors; the backward is autograd's chain of
// each step's derivative. The chains below follow the Llama 3 model code
// of torchtitan (and Hugging Face's Llama, the same steps) at the end of
// 2024; each kernel is timed by the roofline at the elementwise ops'
// bandwidth efficiency, with a launch each.
//
// FlashAttention-2 on Hopper issues Ampere's mma.sync instead of wgmma: at
// head width 128 on one H100 SXM, 329 TFLOP/s forward where cuDNN's kernel
// runs 631 (tritonbench, PyTorch issue 142132), 318 backward against
// cuDNN's 518 at sequence 8k (FlashAttention-3 paper, Figure 5). The
// fused kernel's time (calibrated or roofline) is stretched by those
// ratios on Hopper GPUs; elsewhere FlashAttention-2 is the fused kernel of
// its generation and takes the fused time.

#include <vector>

#include "engine/ir/types.h"
#include "engine/plan/plan.h"
#include "simulator/topology/topology.h"

namespace tandem::sim {

// One kernel of a chain: its arithmetic and the bytes it moves.
struct PassKernel {
  double flops = 0;
  double bytes = 0;
};

// The kernels eager PyTorch runs for `task` in place of the fused one (for
// Attention and AttentionBwd: beside the attention kernel). Empty where
// eager PyTorch runs what the plan runs.
std::vector<PassKernel> eagerKernels(const Task& task, Precision precision);

// How many times longer than the fused attention kernel FlashAttention-2
// takes for `task` on `device` (1 off Hopper and for other tasks).
double flash2Stretch(const Task& task, const DeviceSpec& device);

// Hopper GPUs (H100, H200 and their variants): warpgroup MMA instructions
// that kernels written for Ampere do not issue.
bool hasWarpgroupMma(const DeviceSpec& device);

}  // namespace tandem::sim
