#pragma once
// One GEMM as a plan task asks the GPU executor for it: the role (forward,
// data gradient, weight gradient), the epilogue fused into it and the
// sizes of OpAttrs (x[M,K], W[N,K]). The GEMM census
// (simulator/calibrate/gemm_census.h) lists such problems over a grid of
// shapes; runner/gemm_census_run.h issues each through the executor's own
// cuBLASLt path on a GPU, so that the kernel it records is the one a step
// of that shape would run.

#include <cstdint>
#include <string>

#include "engine/ir/types.h"

namespace tandem {

struct GemmProblem {
  OpKind op = OpKind::Matmul;  // Matmul, MatmulBwdData or MatmulBwdWeight
  // None; Residual or Gelu on the forward; DGelu on the data gradient.
  Epilogue epilogue = Epilogue::None;
  int64_t m = 0, n = 0, k = 0;
  std::string name;  // the problem's name in the census trace (its shape key)
};

}  // namespace tandem
