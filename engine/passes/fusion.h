#pragma once
// Epilogue fusion, decided on the plan (docs/plan-format.md, "Epilogue
// fusion"): a GELU forward right after its matmul becomes the matmul's
// GELU_AUX epilogue, a GELU backward of a data-gradient matmul's output
// becomes that matmul's DGELU epilogue, and a layernorm right after the
// residual add that makes its input is done by the add's kernel (one read of
// the residual stream instead of two). With schedule.residual_in_gemm, a
// residual add right after the matmul that makes one of its inputs is done
// by that matmul's GEMM instead (C = the residual, beta = 1); its layernorm
// then runs alone. The pass runs after memory planning
// and fuses only where the result is the same program: same stream, no
// event that would order another stream between the two tasks, outputs
// that nobody else reads, nothing in between touching the moved memory, no
// accumulation the epilogue cannot express. It records its decisions in the
// tasks (Task::epilogue, epilogue_partner, fused_into), so that the GPU
// executor, the simulator and the calibration all see the same work; the
// CPU reference executor ignores them (the arithmetic is the same).

#include "engine/plan/plan.h"

namespace tandem {

// A fusion the structure allows: `gemm` launches the fused kernel at
// `runs` (== gemm, or the GELU backward's index when memory forces the DGELU
// GEMM to its place); `partner` is the GELU task.
struct EpilogueCandidate {
  Epilogue epilogue = Epilogue::None;
  int gemm = -1;
  int partner = -1;
  int runs = -1;
};

// The candidate that starts at task index `i` (a Matmul, MatmulBwdData or
// Add), or one with Epilogue::None. A matmul's residual add is a candidate
// only with `residual_in_gemm` (schedule.residual_in_gemm).
EpilogueCandidate epilogueCandidate(const RankPlan& program, int i, bool residual_in_gemm = false);

// The residual of a `residual` epilogue: the input of `add` that is not
// the matmul's output `matmul_out`.
inline int residualInput(const Task& add, int matmul_out) {
  return add.reads[0] == matmul_out ? add.reads[1] : add.reads[0];
}

// Whether the bias gradient of weight-gradient task `i` can come out of its
// GEMM (cuBLASLt BGRADB): an executor-level choice, the task stays one task.
bool biasGradInGemmCandidate(const RankPlan& program, int i);

// Records every candidate in the program's tasks (task ids are indices in
// planner plans); returns how many pairs were fused.
int applyEpilogueFusion(RankPlan& program, bool residual_in_gemm = false);

}  // namespace tandem
