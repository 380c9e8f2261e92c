#include "engine/cuda/fusion.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace tandem::cuda {
namespace {

struct Range {
  int64_t lo = 0, hi = 0;
};

Range rangeOf(const RankPlan& p, int buffer) {
  const Buffer& b = p.buffers.at(size_t(buffer));
  return {b.offset, b.offset + b.bytes};
}

bool overlaps(Range a, Range b) { return a.lo < b.hi && b.lo < a.hi; }

bool anyOverlaps(const RankPlan& p, const std::vector<int>& buffers, Range r) {
  return std::any_of(buffers.begin(), buffers.end(), [&](int b) { return overlaps(rangeOf(p, b), r); });
}

bool mentions(const std::vector<int>& buffers, int b) {
  return std::find(buffers.begin(), buffers.end(), b) != buffers.end();
}

DType dtypeOf(const RankPlan& p, int buffer) { return p.buffers.at(size_t(buffer)).dtype; }

// Matmul (i) -> Gelu: the next task on i's stream must be the Gelu of i's
// output, with no event between them. Returns the Gelu's index or -1.
int geluAfterMatmul(const RankPlan& p, int i) {
  const Task& t = p.tasks[size_t(i)];
  if (t.writes.size() != 1 || t.record_event >= 0) return -1;
  for (size_t j = size_t(i) + 1; j < p.tasks.size(); ++j) {
    const Task& u = p.tasks[j];
    if (u.stream != t.stream) continue;
    if (u.op != OpKind::Gelu || u.reads.size() != 1 || u.writes.size() != 1 || u.reads[0] != t.writes[0] ||
        !u.wait_events.empty())
      return -1;
    const int pre = t.writes[0], y = u.writes[0];
    if (dtypeOf(p, pre) != dtypeOf(p, y) || u.attrs.elements != t.attrs.m * t.attrs.n) return -1;
    // y is written while the GEMM still reads its inputs: it must not share
    // memory with them (the planner may reuse an input's memory after its
    // last read) nor with the pre-activation.
    if (overlaps(rangeOf(p, y), rangeOf(p, pre)) || anyOverlaps(p, t.reads, rangeOf(p, y))) return -1;
    return int(j);
  }
  return -1;
}

// MatmulBwdData (i) -> GeluBwd (u) later on the same stream, i's output read
// by u only. The DGELU GEMM reads i's inputs and writes u's output, so one of
// the two tasks must move:
//  - early (at i): u's output is written before the tasks between i and u,
//    so none of them (same stream) may touch its memory or write u's x, and
//    none of (i, u] may wait for another stream;
//  - late (at u): i's inputs are read after the tasks between, so none of
//    them may write i's inputs, and none of [i, u) may record an event
//    (another stream could take the memory of i's inputs after it).
// Returns u or -1; *late says which placement.
int geluBwdAfterMatmulBwdData(const RankPlan& p, int i, bool* late) {
  const Task& t = p.tasks[size_t(i)];
  if (t.writes.size() != 1 || t.attrs.accumulate) return -1;
  const int out = t.writes[0];
  const Buffer& ob = p.buffers.at(size_t(out));
  if (ob.parent >= 0) return -1;
  for (const Buffer& b : p.buffers)
    if (b.parent == out) return -1;
  int u_index = -1;
  for (size_t j = size_t(i) + 1; j < p.tasks.size(); ++j) {
    const Task& u = p.tasks[j];
    if (u.stream != t.stream) continue;
    if (mentions(u.reads, out) || mentions(u.writes, out)) {
      if (u.op != OpKind::GeluBwd || u.reads.size() != 2 || u.writes.size() != 1 || u.reads[0] != out ||
          u.attrs.accumulate)
        return -1;
      u_index = int(j);
      break;
    }
  }
  if (u_index < 0) return -1;
  const Task& u = p.tasks[size_t(u_index)];
  const int pre = u.reads[1], dx = u.writes[0];
  if (dtypeOf(p, pre) != dtypeOf(p, out) || dtypeOf(p, dx) != dtypeOf(p, out) ||
      u.attrs.elements != t.attrs.m * t.attrs.k)
    return -1;
  const Range rdx = rangeOf(p, dx), rpre = rangeOf(p, pre);
  // The GEMM writes dx while it reads its inputs and x.
  if (overlaps(rdx, rpre) || anyOverlaps(p, t.reads, rdx)) return -1;
  // Nobody else (any stream) may read or write the gradient the GEMM no longer writes.
  for (size_t j = 0; j < p.tasks.size(); ++j) {
    if (int(j) == i || int(j) == u_index) continue;
    if (mentions(p.tasks[j].reads, out) || mentions(p.tasks[j].writes, out)) return -1;
  }
  bool early = u.wait_events.empty(), at_u = t.record_event < 0;
  for (int j = i + 1; j < u_index; ++j) {
    const Task& v = p.tasks[size_t(j)];
    if (v.stream != t.stream) continue;
    if (!v.wait_events.empty() || anyOverlaps(p, v.reads, rdx) || anyOverlaps(p, v.writes, rdx) ||
        anyOverlaps(p, v.writes, rpre))
      early = false;
    if (v.record_event >= 0) at_u = false;
    for (int b : t.reads)
      if (anyOverlaps(p, v.writes, rangeOf(p, b))) at_u = false;
  }
  if (!early && !at_u) return -1;
  *late = !early;
  return u_index;
}

bool biasGradCandidate(const RankPlan& p, int i) {
  const Task& t = p.tasks[size_t(i)];
  if (!t.attrs.has_bias || t.attrs.accumulate_params || t.writes.size() < 2) return false;
  if (dtypeOf(p, t.writes[1]) != dtypeOf(p, t.writes[0])) return false;
  const Range db = rangeOf(p, t.writes[1]);
  return !anyOverlaps(p, t.reads, db) && !overlaps(rangeOf(p, t.writes[0]), db);
}

const char* kindName(FusionKind k) {
  switch (k) {
    case FusionKind::MatmulGelu: return "matmul+gelu (GELU_AUX_BIAS)";
    case FusionKind::MatmulBwdDataGelu: return "matmul_bwd_data+gelu_bwd (DGELU)";
    case FusionKind::MatmulBwdWeightBias: return "bias gradient in the weight GEMM (BGRADB)";
    case FusionKind::None: break;
  }
  return "none";
}

}  // namespace

unsigned fusionKinds(unsigned option) {
  const char* env = std::getenv("TANDEM_FUSION");
  if (!env || !*env) return option & kAllFusions;
  if (std::strcmp(env, "0") == 0) return 0;
  if (std::strcmp(env, "1") == 0) return kGeluFusions;
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
  for (size_t i = 0; i < p.tasks.size(); ++i) {
    const Task& t = p.tasks[i];
    int partner = -1;
    bool late = false;
    FusionKind kind = FusionKind::None;
    if (t.op == OpKind::Matmul && (partner = geluAfterMatmul(p, int(i))) >= 0)
      kind = FusionKind::MatmulGelu;
    else if (t.op == OpKind::MatmulBwdData && (partner = geluBwdAfterMatmulBwdData(p, int(i), &late)) >= 0)
      kind = FusionKind::MatmulBwdDataGelu;
    else if (t.op == OpKind::MatmulBwdWeight && biasGradCandidate(p, int(i)))
      kind = FusionKind::MatmulBwdWeightBias;
    if (kind == FusionKind::None || !(kinds & fusionBit(kind)) || f.tasks[i].issues_nothing ||
        !ask(int(i), partner, kind))
      continue;
    // The GEMM runs at `runs`; `quiet` issues nothing.
    const size_t runs = late ? size_t(partner) : i;
    f.tasks[runs].kind = kind;
    f.tasks[runs].partner = late ? int(i) : partner;
    if (partner >= 0) {
      const size_t quiet = late ? i : size_t(partner);
      f.tasks[quiet].issues_nothing = true;
      f.tasks[quiet].into = int(runs);
      f.fused_task_ids.push_back(p.tasks[quiet].id);
      f.fused_into.push_back({p.tasks[quiet].id, p.tasks[runs].id});
    }
    if (kind == FusionKind::MatmulGelu) ++f.matmul_gelu;
    if (kind == FusionKind::MatmulBwdDataGelu) ++f.matmul_bwd_data_gelu;
    if (kind == FusionKind::MatmulBwdWeightBias) {
      ++f.matmul_bwd_weight_bias;
      f.bias_in_gemm_task_ids.push_back(t.id);
    }
  }
  std::sort(f.fused_task_ids.begin(), f.fused_task_ids.end());
  std::sort(f.fused_into.begin(), f.fused_into.end());
  return f;
}

std::string FusionPlan::summary() const {
  if (!enabled) return "epilogue fusion: off";
  std::string which;
  if (kinds != kAllFusions) {
    which = " (kinds:";
    if (kinds & fusionBit(FusionKind::MatmulGelu)) which += " gelu";
    if (kinds & fusionBit(FusionKind::MatmulBwdDataGelu)) which += " dgelu";
    if (kinds & fusionBit(FusionKind::MatmulBwdWeightBias)) which += " bgrad";
    which += ")";
  }
  std::string s = fmt::format(
      "epilogue fusion: {} matmul+gelu, {} matmul_bwd_data+gelu_bwd, {} bias gradients in the weight GEMM; "
      "{} tasks issue no kernel of their own{}",
      matmul_gelu, matmul_bwd_data_gelu, matmul_bwd_weight_bias, fused_task_ids.size(), which);
  if (refused > 0) s += fmt::format("; {} candidates refused by cuBLASLt (separate kernels kept)", refused);
  return s;
}

}  // namespace tandem::cuda
