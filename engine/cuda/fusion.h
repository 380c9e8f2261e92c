#pragma once
// cuBLASLt epilogue fusion in the executor (docs/gpu-executor.md, "Epilogue
// fusion"). Which GELUs move into their GEMM is the plan's decision
// (engine/passes/fusion.h: Task::epilogue, epilogue_partner, fused_into), so
// the simulation and the calibration see the same work; here each planned
// pair is checked with cuBLASLt (the `supported` callback) and becomes one
// GEMM with an epilogue. Every task keeps its id, its place and its events;
// the task that issues nothing is skipped, and the GEMM's kernel is
// attributed to the task that launches it.
//
//   Matmul -> Gelu            the matmul writes GELU's output (D) and the
//                             pre-activation (aux): CUBLASLT_EPILOGUE_GELU_AUX_BIAS
//   MatmulBwdData -> GeluBwd  the data gradient is multiplied by gelu'(x)
//                             and written to GeluBwd's output: CUBLASLT_EPILOGUE_DGELU,
//                             launched by the MatmulBwdData or, where the
//                             memory plan forbids that, by the GeluBwd
//   Matmul -> Add             the matmul adds the add's other input as its C
//                             operand (beta = 1) and writes the add's output
//                             (schedule.residual_in_gemm)
//   MatmulBwdWeight (bias)    the bias gradient comes out of the weight
//                             gradient's GEMM: CUBLASLT_EPILOGUE_BGRADB. The
//                             executor's own choice inside one task (the plan
//                             does not change), off by default.
//
// Tried and not kept: the fc layer's bias gradient summed by the DGELU GEMM
// (CUBLASLT_EPILOGUE_DGELU_BGRAD) instead of biasGradient's two kernels made
// GPT-2 124M's step 2.5 ms slower on one H200 (32.9 against 30.4 ms).
//
// A pair cuBLASLt refuses runs as two kernels, as does every pair when the
// GELU kinds are not allowed (ExecutorOptions::fusion, TANDEM_FUSION=0): the
// run then differs from its plan, and FusionPlan says so.

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/plan/plan.h"

namespace tandem::cuda {

enum class FusionKind { None, MatmulGelu, MatmulBwdDataGelu, MatmulBwdWeightBias, AddLayerNorm, MatmulResidual };

// Which fusions to apply: a set of FusionKind bits.
constexpr unsigned fusionBit(FusionKind k) { return 1u << unsigned(k); }
inline constexpr unsigned kAllFusions = fusionBit(FusionKind::MatmulGelu) |
                                        fusionBit(FusionKind::MatmulBwdDataGelu) |
                                        fusionBit(FusionKind::MatmulBwdWeightBias) |
                                        fusionBit(FusionKind::AddLayerNorm) |
                                        fusionBit(FusionKind::MatmulResidual);
// The two GELU fusions (TANDEM_FUSION=1). The bias gradient in the weight
// GEMM (BGRADB) is correct but was not faster on H200 (GPT-2 124M: the GEMM
// with that epilogue took as long as GEMM + biasGradient kernel).
inline constexpr unsigned kGeluFusions = fusionBit(FusionKind::MatmulGelu) |
                                            fusionBit(FusionKind::MatmulBwdDataGelu);
// The fusions the plan decides (engine/passes/fusion.h), the executor's
// default: the two GELU epilogues, the residual add with its layernorm and
// the residual add in its GEMM.
inline constexpr unsigned kPlanFusions =
    kGeluFusions | fusionBit(FusionKind::AddLayerNorm) | fusionBit(FusionKind::MatmulResidual);

// What one task of the program does under fusion (index = task index).
struct TaskFusion {
  FusionKind kind = FusionKind::None;  // set on the task that runs the fused GEMM
  int partner = -1;                    // the other task of a pair (index), whose buffers the GEMM uses
  bool issues_nothing = false;         // a fused task: its work runs in `into`
  int into = -1;                       // the task index that runs the GEMM (issues_nothing only)
};

struct FusionPlan {
  std::vector<TaskFusion> tasks;
  std::vector<int> fused_task_ids;  // plan task ids that issue no kernel of their own
  std::vector<std::pair<int, int>> fused_into;  // (fused task id, id of the task whose GEMM does its work)
  std::vector<int> bias_in_gemm_task_ids;  // MatmulBwdWeight task ids whose bias gradient is in the GEMM
  int matmul_gelu = 0;              // fusions applied, by kind
  int matmul_bwd_data_gelu = 0;
  int matmul_bwd_weight_bias = 0;
  int refused = 0;                  // candidates cuBLASLt refused (separate kernels kept)
  std::vector<std::string> refusals;  // one line per refused candidate (task name: why)
  bool enabled = true;
  int add_layernorm = 0;
  int matmul_residual = 0;
  unsigned kinds = kPlanFusions;   // the kinds that were allowed
  // One line for logs: "epilogue fusion: 12 matmul+gelu, ..." or "... off".
  std::string summary() const;
};

// `supported(producer task index, partner task index or -1, kind)` asks
// cuBLASLt whether the fused GEMM exists for those shapes, dtypes and pointers.
using FusionSupported = std::function<bool(int task, int partner, FusionKind kind)>;

// The plan's GELU fusions and, with that kind allowed, the bias-gradient
// candidates, each checked with supported(), for the kinds in `kinds`; 0
// returns an empty plan (every task issues its own work). Throws when the
// plan's fusion fields do not name each other.
FusionPlan planFusion(const RankPlan& program, unsigned kinds, const FusionSupported& supported);

// The fusions to apply: `option` (a set of kinds, ExecutorOptions::fusion)
// unless the environment overrides it: TANDEM_FUSION=0 (none), =1 (the
// default kinds), =all, or a list of kinds, e.g. TANDEM_FUSION=gelu,dgelu,bgrad
// (the others: addln, residual).
unsigned fusionKinds(unsigned option);
// fusionKinds(option) != 0.
bool fusionEnabled(unsigned option);

}  // namespace tandem::cuda
