#include "engine/cuda/fusion.h"

#include "engine/passes/fusion.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace tandem::cuda {
namespace {

const char* kindName(FusionKind k) {
  switch (k) {
    case FusionKind::MatmulGelu: return "matmul+gelu (GELU_AUX_BIAS)";
    case FusionKind::MatmulBwdDataGelu: return "matmul_bwd_data+gelu_bwd (DGELU)";
    case FusionKind::MatmulBwdWeightBias: return "bias gradient in the weight GEMM (BGRADB)";
    case FusionKind::AddLayerNorm: return "add+layernorm";
    case FusionKind::MatmulResidual: return "matmul+residual add (beta = 1)";
    case FusionKind::None: break;
  }
  return "none";
}

}  // namespace

unsigned fusionKinds(unsigned option) {
  const char* env = std::getenv("TANDEM_FUSION");
  if (!env || !*env) return option & kAllFusions;
  if (std::strcmp(env, "0") == 0) return 0;
  if (std::strcmp(env, "1") == 0) return kPlanFusions;
  if (std::strcmp(env, "all") == 0) return kAllFusions;
  unsigned kinds = 0;
  const std::string list = env;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string k = list.substr(start, end - start);
    if (k == "gelu") kinds |= fusionBit(FusionKind::MatmulGelu);
    else if (k == "dgelu") kinds |= fusionBit(FusionKind::MatmulBwdDataGelu);
    else if (k == "bgrad") kinds |= fusionBit(FusionKind::MatmulBwdWeightBias);
    else if (k == "addln") kinds |= fusionBit(FusionKind::AddLayerNorm);
    else if (k == "residual") kinds |= fusionBit(FusionKind::MatmulResidual);
    start = end + 1;
  }
  return kinds;
}

bool fusionEnabled(unsigned option) { return fusionKinds(option) != 0; }

FusionPlan planFusion(const RankPlan& p, unsigned kinds, const FusionSupported& supported) {
  FusionPlan f;
  f.enabled = kinds != 0;
  f.kinds = kinds;
  f.tasks.assign(p.tasks.size(), TaskFusion{});
  if (kinds == 0) return f;
  auto ask = [&](int i, int partner, FusionKind k) {
    if (supported(i, partner, k)) return true;
    ++f.refused;
    f.refusals.push_back(fmt::format("{}: {} refused by cuBLASLt", p.tasks[size_t(i)].name, kindName(k)));
    return false;
  };
  const int n = int(p.tasks.size());
  for (int i = 0; i < n; ++i) {
    const Task& t = p.tasks[size_t(i)];
    // The plan's epilogue fusions (engine/passes/fusion.h), on the task that
    // launches the fused GEMM; task ids are indices in planner plans.
    if (t.epilogue != Epilogue::None) {
      const int quiet = t.epilogue_partner;
      if (quiet < 0 || quiet >= n || p.tasks[size_t(quiet)].fused_into != t.id)
        throw std::runtime_error(fmt::format("plan task {} '{}': epilogue partner {} does not name it in fused_into",
                                             t.id, t.name, quiet));
      const FusionKind kind = t.epilogue == Epilogue::Gelu           ? FusionKind::MatmulGelu
                              : t.epilogue == Epilogue::AddLayerNorm ? FusionKind::AddLayerNorm
                              : t.epilogue == Epilogue::Residual     ? FusionKind::MatmulResidual
                                                                     : FusionKind::MatmulBwdDataGelu;
      // The GEMM's own task is the producer the cuBLASLt check is asked about.
      const int gemm = p.tasks[size_t(quiet)].op == OpKind::MatmulBwdData ? quiet : i;
      const int gelu = gemm == i ? quiet : i;
      if (!(kinds & fusionBit(kind)) || !ask(gemm, gelu, kind)) continue;
      f.tasks[size_t(i)].kind = kind;
      f.tasks[size_t(i)].partner = quiet;
      f.tasks[size_t(quiet)].issues_nothing = true;
      f.tasks[size_t(quiet)].into = i;
      f.fused_task_ids.push_back(p.tasks[size_t(quiet)].id);
      f.fused_into.push_back({p.tasks[size_t(quiet)].id, t.id});
      if (kind == FusionKind::MatmulGelu) ++f.matmul_gelu;
      else if (kind == FusionKind::AddLayerNorm) ++f.add_layernorm;
      else if (kind == FusionKind::MatmulResidual) ++f.matmul_residual;
      else ++f.matmul_bwd_data_gelu;
    } else if (t.op == OpKind::MatmulBwdWeight && (kinds & fusionBit(FusionKind::MatmulBwdWeightBias)) &&
               biasGradInGemmCandidate(p, i) && ask(i, -1, FusionKind::MatmulBwdWeightBias)) {
      f.tasks[size_t(i)].kind = FusionKind::MatmulBwdWeightBias;
      ++f.matmul_bwd_weight_bias;
      f.bias_in_gemm_task_ids.push_back(t.id);
    }
  }
  std::sort(f.fused_task_ids.begin(), f.fused_task_ids.end());
  std::sort(f.fused_into.begin(), f.fused_into.end());
  return f;
}

std::string FusionPlan::summary() const {
  if (!enabled) return "fusion: off";
  std::string which;
  if (kinds != kAllFusions) {
    which = " (kinds:";
    if (kinds & fusionBit(FusionKind::MatmulGelu)) which += " gelu";
    if (kinds & fusionBit(FusionKind::MatmulBwdDataGelu)) which += " dgelu";
    if (kinds & fusionBit(FusionKind::MatmulBwdWeightBias)) which += " bgrad";
    if (kinds & fusionBit(FusionKind::AddLayerNorm)) which += " addln";
    if (kinds & fusionBit(FusionKind::MatmulResidual)) which += " residual";
    which += ")";
  }
  std::string s = fmt::format(
      "fusion: {} matmul+gelu, {} matmul_bwd_data+gelu_bwd, {} add+layernorm, {} matmul+residual add, {} bias "
      "gradients in the weight GEMM; {} tasks issue no kernel of their own{}",
      matmul_gelu, matmul_bwd_data_gelu, add_layernorm, matmul_residual, matmul_bwd_weight_bias,
      fused_task_ids.size(), which);
  if (refused > 0) s += fmt::format("; {} candidates refused by cuBLASLt (separate kernels kept)", refused);
  return s;
}

}  // namespace tandem::cuda
