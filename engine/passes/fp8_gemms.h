#pragma once
// FP8 GEMMs (training.precision fp8), as Transformer Engine runs them in
// Megatron-LM and NeMo: the linear layers of the transformer blocks (QKV,
// the attention's output projection, the MLP's two layers; not the
// embedding or the LM head) multiply FP8 copies of their two operands, at
// the GPU's FP8 tensor-core rate, accumulating in fp32 and writing bf16.
// Everything else stays as in a bf16 job (bf16 weights and activations,
// fp32 master weights and moments).
//
// Each operand gets its FP8 copy once per value:
//   - an activation whose one writer is a norm, an activation function or
//     an activation's backward, and whose every reader is an FP8 GEMM, is
//     written in FP8 by that kernel (Transformer Engine fuses the cast into
//     it: LayerNormLinear, the activations' FP8 output, dact + cast +
//     transpose), so the bf16 tensor never exists and the backward's
//     weight GEMM reads the kept FP8 copy; under delayed scaling the
//     grouped attention's backward can write its q, k and v gradient so
//     too (training.fp8_attention_grad, off by default: Transformer Engine
//     casts it, and so does tandem unless asked);
//   - any other operand (a weight, a gathered or received tensor, a
//     gradient accumulated by several writers) is cast by a CastFp8 task
//     before its first FP8 reader; the copy serves later GEMMs until the
//     tensor is written again. A weight is cast once per step (Transformer
//     Engine keeps the FP8 weights over the micro-batches of a step) and
//     its copy lives until its last GEMM. When a backward GEMM reads the
//     operand K-major (fp8TransposedSlot), the cast also writes the
//     transposed copy, which that GEMM reads (Transformer Engine's
//     cast-transpose): Hopper's FP8 GEMMs read both operands K-major.
// With sequence parallelism a gather whose rows only FP8 GEMMs read moves
// them in FP8 (half the bytes): the rank's tokens are cast (or written in
// FP8 by their norm) before it, as Transformer Engine does.
// Under current scaling a cast whose input SwiGLU's forward or backward
// wrote (one elementwise kernel writing all of it) gets amax_by_writer: that
// kernel takes the amax as it writes, and the cast reads its input once (as
// tandem's kernels do, and a compiler fusing the reduction into the
// producer would; not with schedule.elementwise eager, whose SwiGLU is a
// chain of kernels).
// The scaling factors (one per tensor, from the amax history) are a few
// floats per tensor and are not planned as buffers.

#include <optional>
#include <string>
#include <string_view>

#include "engine/ir/graph.h"
#include "engine/spec/job.h"

namespace tandem {

// Returns the number of CastFp8 tasks added (0 unless the job is fp8).
int applyFp8Gemms(Graph& g, const JobSpec& job);

// Why `runner` (an executor: "tandem run", "tandem train") cannot run the
// job's plan when training.fp8_param_gather takes effect in it (FP8 with
// gathered parameters): the executors gather bf16. Nothing otherwise.
std::optional<std::string> fp8ParamGatherRefusal(const JobSpec& job, std::string_view runner);

}  // namespace tandem
